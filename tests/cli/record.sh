#!/usr/bin/env bash
# tests/cli/record.sh - togglectl record end to end (docs/recording.md): the
# real toggled on a private socket, tests/record/ring_agent (an agent that
# writes its data ring by hand, values that say what they are) and the real
# togglectl.  The files are read back with graphtoggle.recording (python3,
# the standard library only) and every value is checked; the hooks a
# recording added must be gone when it ends (steps done, interrupted, a
# full disk); errors exit with their code and a clear message.
#
#   B=build tests/cli/record.sh     (make check-record does this)
#   KEEP=1 tests/cli/record.sh      keep the temporary directory
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
TL_NAME=record.sh
# shellcheck source=tests/lib.sh
. "$HERE/../lib.sh"
CTL=$B/togglectl
DAEMON=$B/toggled
AGENT=$B/tests/record_ring_agent
tl_need "$CTL" "$DAEMON" "$AGENT"
command -v python3 >/dev/null 2>&1 || { echo "record.sh: python3 is needed" >&2; exit 1; }

tl_tmpdir tgrec
SOCK=$T/t.sock
DPID=
APIDS=
cleanup() {
	for p in $APIDS $DPID; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	tl_rm_tmpdir
}
trap cleanup EXIT

ctl() {
	"$CTL" --socket "$SOCK" "$@" >"$T/out" 2>"$T/err"
	RC=$?
	CHECKS=$((CHECKS + 1))
}
expect_rc() { # WANT WHAT
	[ "$RC" = "$1" ] || fail "$2: exit $RC, expected $1 (stderr: $(cat "$T/err"))"
}
expect_err() { # TEXT WHAT
	grep -q -- "$1" "$T/err" || fail "$2: stderr lacks '$1': $(cat "$T/err")"
}

# enabled_is NAME SPEC: the agent's standing set as togglectl shows it.
enabled_is() {
	"$CTL" --socket "$SOCK" --json agents | python3 -c '
import json, sys
a = [a for a in json.load(sys.stdin)["agents"] if a["name"] == sys.argv[1]]
sys.exit(0 if a and a[0]["enabled"] == sys.argv[2] else 1)' "$1" "$2"
}

# check_files DIR SPEC_HOOKS N_STEPS COMPLETE: every record's values, hooks and steps.
check_files() {
	CHECKS=$((CHECKS + 1))
	PYTHONPATH=$TOP/python python3 - "$@" <<'EOF' || fail "files of $1 (above)"
import struct, sys
import graphtoggle.recording as rec
d, hooks, n_steps, complete = sys.argv[1], set(sys.argv[2].split(",")), int(sys.argv[3]), sys.argv[4]
types = {"resid_post": 0, "attn_out": 1}
r = rec.open(d, as_="bytes")
assert r.complete == (complete == "1"), ("complete", r.index.get("complete"), r.index.get("stopped"))
seen = {}
for x in r:
    t, l = x.hook.split(":")
    vals = struct.unpack("<%df" % (len(x.tensor) // 4), x.tensor)
    assert x.hook in hooks, ("hook not asked for", x.hook)
    assert x.dtype == "F32" and x.shape[0] == x.batch and len(x.shape) == 2, x
    assert vals[0] == x.step * 1000 + types[t] * 100 + int(l), (x, vals[0])
    assert all(vals[i] == i for i in range(1, len(vals))), x
    seen.setdefault(x.step, set()).add(x.hook)
steps = sorted(seen)
if n_steps >= 0:
    assert len(steps) == n_steps, ("steps", steps)
assert steps == list(range(steps[0], steps[0] + len(steps))), ("gap in steps", steps)
for s in steps:
    assert seen[s] == hooks, ("step", s, "has", seen[s])
print("ok", d, len(steps), "steps")
EOF
}

"$DAEMON" --socket "$SOCK" --state-dir "$T/state" -v 2>"$T/toggled.log" &
DPID=$!
wait_for 10 "toggled listens" test -S "$SOCK"
"$AGENT" --socket "$SOCK" --name eng --period-ms 5 >"$T/eng.log" 2>&1 &
APIDS="$APIDS $!"
"$AGENT" --socket "$SOCK" --name big --period-ms 5 --width 4096 >"$T/big.log" 2>&1 &
APIDS="$APIDS $!"
wait_for 10 "agents registered" enabled_is big none
ctl set --target name:eng attn_out:0
expect_rc 0 "set"

# --steps: exactly N steps, the hooks asked for, the added ones removed after.
ctl --target name:eng record 'resid_post:1,attn_out:*' --steps 4 -o "$T/r1"
expect_rc 0 "record --steps 4"
expect_err "complete" "record's summary line"
check_files "$T/r1" resid_post:1,attn_out:0,attn_out:1,attn_out:2,attn_out:3 4 1
wait_for 5 "record's hooks removed, attn_out:0 kept" enabled_is eng attn_out:0

# --json: progress lines, then the summary.
ctl --json --agents name:eng record resid_post:0 --steps 3 -o "$T/r2"
expect_rc 0 "record --json"
CHECKS=$((CHECKS + 1))
tail -n 1 "$T/out" | python3 -c '
import json, sys
r = json.load(sys.stdin)["recorded"]
assert r["complete"] and r["records"] == 3 and r["steps"] == 3 and r["files"] == 3, r
assert r["bytes"] == 3 * 2 * 8 * 4 and r["dropped"] == 0, r' || fail "record --json summary: $(cat "$T/out")"
check_files "$T/r2" resid_post:0 3 1

# --until-interrupt: SIGINT ends it; what was gathered is written, marked incomplete.
"$CTL" --socket "$SOCK" --target name:eng record resid_post:2 -o "$T/r3" >"$T/r3.out" 2>"$T/r3.err" &
RPID=$!
wait_for 10 "interruptible recording wrote files" sh -c "ls '$T/r3'/eng-*/ | grep -q safetensors"
wait_for 5 "recording's hook on" enabled_is eng resid_post:2,attn_out:0
kill -INT "$RPID"
wait "$RPID"
RC=$?
CHECKS=$((CHECKS + 1))
expect_rc 0 "record interrupted"
check_files "$T/r3" resid_post:2 -1 0
wait_for 5 "interrupted recording's hook removed" enabled_is eng attn_out:0

# A full disk (here a file size limit: write() fails the same way, EFBIG).
( ulimit -f 16; exec "$CTL" --socket "$SOCK" --target name:big record 'attn_out:*' --steps 50 -o "$T/r4" ) \
	>"$T/out" 2>"$T/err"
RC=$?
CHECKS=$((CHECKS + 1))
expect_rc 1 "record on a full disk"
expect_err "cannot write $T/r4" "full disk: the path"
expect_err "File too large" "full disk: errno's text"
wait_for 5 "full disk: hooks removed" enabled_is big none

# Refused before anything runs.
ctl --target name:eng record resid_post:9 -o "$T/r5"
expect_rc 1 "record outside the catalog"
expect_err "out of range" "outside the catalog"
enabled_is eng attn_out:0 || fail "a refused recording changed the set"
ctl record resid_post:0
expect_rc 2 "record without -o"
expect_err "needs -o DIR" "record without -o"
ctl record resid_post:0 --steps 2 --until-interrupt -o "$T/r6"
expect_rc 2 "--steps with --until-interrupt"
ctl set resid_post:0 -o "$T/r6"
expect_rc 2 "-o on set"
ctl record resid_post:0 --steps 0 -o "$T/r6"
expect_rc 2 "--steps 0"
ctl --target name:eng record resid_post:0 --steps 1 -o "$T/r1"
expect_rc 2 "a directory that holds a recording"
expect_err "already holds a recording" "a directory that holds a recording"

kill -0 "$DPID" 2>/dev/null || fail "toggled died"
kill "$DPID"
wait "$DPID"
RC=$?
CHECKS=$((CHECKS + 1))
expect_rc 0 "toggled's exit"
DPID=
echo "record.sh: $CHECKS checks, $FAILS failed"
[ "$FAILS" -eq 0 ]
