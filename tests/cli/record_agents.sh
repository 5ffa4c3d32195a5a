#!/usr/bin/env bash
# tests/cli/record_agents.sh - `togglectl agents` with data rings (issue 24;
# docs/cli.md): the table's RING, RECORDS, DROPPED and FORWARDED columns
# and --json's "ring" object, with the real toggled, tests/record/ring_agent
# (shares a ring) and demo_agent (shares none: its row reads "-").  After
# `togglectl record --steps 3`, what toggled forwarded is 3 records of
# 2 x 8 F32 and the agent dropped nothing.  Hostile counters are
# tests/check_record_drops.c's.
#
#   B=build tests/cli/record_agents.sh     (make check-record does this)
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
TL_NAME=record_agents.sh
# shellcheck source=tests/lib.sh
. "$HERE/../lib.sh"
CTL=$B/togglectl
DAEMON=$B/toggled
AGENT=$B/tests/record_ring_agent
DEMO=$B/examples/demo_agent
tl_need "$CTL" "$DAEMON" "$AGENT" "$DEMO"
command -v python3 >/dev/null 2>&1 || { echo "record_agents.sh: python3 is needed" >&2; exit 1; }

tl_tmpdir tgrag
SOCK=$T/t.sock
DPID=
RPID=
APIDS=
cleanup() {
	for p in $RPID $APIDS $DPID; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	tl_rm_tmpdir
}
trap cleanup EXIT

agents_are() { # N: that many agents listed
	[ "$("$CTL" --socket "$SOCK" --json agents | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["agents"]))')" = "$1" ]
}

"$DAEMON" --socket "$SOCK" --state-dir "$T/state" -v 2>"$T/toggled.log" &
DPID=$!
wait_for 10 "toggled listens" test -S "$SOCK"
"$AGENT" --socket "$SOCK" --name rng --period-ms 5 >"$T/rng.log" 2>&1 &
RPID=$!
"$DEMO" --backend sim --socket "$SOCK" --period-ms 5 --name plain >"$T/demo.log" 2>&1 &
APIDS="$APIDS $!"
wait_for 10 "agents registered" agents_are 2

"$CTL" --socket "$SOCK" --agents name:rng record resid_post:1 --steps 3 -o "$T/rec" >"$T/out" 2>"$T/err"
RC=$?
CHECKS=$((CHECKS + 1))
[ "$RC" = 0 ] || fail "record --steps 3: exit $RC ($(cat "$T/err"))"

CHECKS=$((CHECKS + 1))
"$CTL" --socket "$SOCK" --json agents >"$T/json" 2>"$T/err" || fail "agents --json: $(cat "$T/err")"
python3 - "$T/json" <<'PY' || fail "agents --json ring: $(cat "$T/json")"
import json, sys
a = {x["name"]: x for x in json.load(open(sys.argv[1]))["agents"]}
r = a["rng"]["ring"]
assert a["plain"]["ring"] is None, a["plain"]["ring"]
assert set(r) == {"bytes", "records", "dropped", "errors", "forwarded_records",
                  "forwarded_bytes", "counter_faults"}, r
assert r["bytes"] == 1024 * 1024 and r["dropped"] == 0 and r["errors"] == 0, r
assert r["forwarded_records"] == 3 and r["forwarded_bytes"] == 3 * 2 * 8 * 4, r
assert r["records"] >= 3 and r["counter_faults"] == 0, r
PY

CHECKS=$((CHECKS + 1))
"$CTL" --socket "$SOCK" agents >"$T/table" 2>"$T/err" || fail "agents: $(cat "$T/err")"
python3 - "$T/table" <<'PY' || fail "agents table: $(cat "$T/table")"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
head = lines[0].split()
assert head[-4:] == ["RING", "RECORDS", "DROPPED", "FORWARDED"], head
rows = {}
for l in lines[1:]:
    cells = re.split(r"\s{2,}", l.strip())
    rows[cells[1]] = cells
rng, plain = rows["rng"], rows["plain"]
assert rng[-4] == "1024 KiB" and rng[-2] == "0" and rng[-1] == "3 (0.0 MiB)", rng
assert int(rng[-3]) >= 3, rng
assert plain[-4:] == ["-", "-", "-", "-"], plain
PY

# Without any ring the table has no ring column (the goldens of tests/cli/run.sh).
kill "$RPID"
wait "$RPID" 2>/dev/null
RPID=
wait_for 10 "ring agent left" agents_are 1
CHECKS=$((CHECKS + 1))
"$CTL" --socket "$SOCK" agents >"$T/table" 2>"$T/err"
head -n 1 "$T/table" | grep -q RING && fail "a RING column without rings: $(cat "$T/table")"

kill "$DPID"
wait "$DPID"
RC=$?
CHECKS=$((CHECKS + 1))
[ "$RC" = 0 ] || fail "toggled's exit $RC"
DPID=
echo "record_agents.sh: $CHECKS checks, $FAILS failed"
[ "$FAILS" -eq 0 ]
