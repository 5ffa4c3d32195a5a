#!/usr/bin/env bash
# tests/cluster/run.sh - the cluster layer end to end: a real etcd started
# here on 127.0.0.1 (free ports, its own data directory), three toggled
# (ASan build) as hosts h1, h2, h3 (own sockets and state directories), two
# demo_agent (simulator) per host, togglectl --etcd and etcdctl.
#
#   a cluster set reaches every agent; a host set only that host's; a plan
#   reaches every agent, a late one is rejected and reported; kill -9 one
#   toggled, change the desired state, restart it: it catches up from its
#   saved revision (no resync) and nothing is lost, and its status key goes
#   with its lease; etcd restarted: every toggled reconnects; a compacted
#   saved revision: full resync, logged once; etcd stopped: local requests
#   still answered, and the cluster resumes when etcd is back.  Also: an
#   idle host does not rewrite its status every second (1a); plan keys go
#   with their lease (2c); a restarted host's first status names the
#   revision it caught up to (3); a 3-member etcd in network namespaces:
#   at most 2 connections per idle host and no TIME_WAIT made, a member cut
#   from its peers and a hung member left within 10 s, the watched member
#   in the local status and /metrics (8); TLS and users (9).
#
#   B=build tests/cluster/run.sh   (make check-cluster does this)
#   KEEP=1 ...                     keep the temporary directory
#
# etcd and etcdctl are required (scripts/deps.sh installs etcd-server and
# etcd-client): without them this test FAILS, it does not skip.  Every wait
# is bounded.
set -u

TL_NAME=cluster/run.sh
TL_WAIT_IS_CHECK=1 # every wait_for counts in CHECKS
# shellcheck source=tests/lib.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib.sh"
CTL=$B/togglectl
DAEMON=${TOGGLED:-$B/toggled-san}
AGENT=$B/examples/demo_agent

tl_need "$CTL" "$DAEMON" "$AGENT"
for t in etcd etcdctl python3; do
	if ! command -v "$t" >/dev/null 2>&1; then
		echo "cluster/run.sh: FAIL: $t is not installed (scripts/deps.sh installs etcd-server," \
			"etcd-client, python3); the cluster tests need a real etcd" >&2
		exit 1
	fi
done

tl_tmpdir tgclu
EPID=
DPIDS=(x "" "" "" "")
APIDS=
export ETCDCTL_API=3
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1

MPIDS= # section 8: members and hosts in network namespaces of this test
NSA=tgclu$$a NSB=tgclu$$b
NS_MADE=
cleanup() {
	for p in $APIDS ${DPIDS[1]} ${DPIDS[2]} ${DPIDS[3]} ${DPIDS[4]} $EPID $MPIDS; do
		[ -n "$p" ] && kill -CONT "$p" 2>/dev/null && kill "$p" 2>/dev/null
	done
	wait 2>/dev/null
	if [ -n "$NS_MADE" ]; then
		ip netns del "$NSA" 2>/dev/null
		ip netns del "$NSB" 2>/dev/null
	fi
	tl_rm_tmpdir
}
trap cleanup EXIT

# Two free loopback ports (bound and released: a race with another
# process is possible but etcd then fails loudly).
read -r CPORT PPORT < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
EURL=http://127.0.0.1:$CPORT
CL="--etcd $EURL --cluster tc"

start_etcd() {
	etcd --name t --data-dir "$T/etcd" --listen-client-urls "$EURL" --advertise-client-urls "$EURL" \
		--listen-peer-urls "http://127.0.0.1:$PPORT" \
		--initial-advertise-peer-urls "http://127.0.0.1:$PPORT" \
		--initial-cluster "t=http://127.0.0.1:$PPORT" >>"$T/etcd.log" 2>&1 &
	EPID=$!
	for _ in $(seq 100); do
		etcdctl --endpoints "$EURL" --command-timeout=1s endpoint health >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	fail "etcd did not become healthy in 10 s (see $T/etcd.log)"
	exit 1
}

# stop_pid PID WHAT: SIGTERM, then at most 10 s for it to exit (else -9 and
# a failure); leaves its exit status in $STOP_RC.
stop_pid() {
	kill "$1" 2>/dev/null
	for _ in $(seq 200); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$1" 2>/dev/null; then
		fail "$2 did not exit within 10 s of SIGTERM"
		kill -9 "$1" 2>/dev/null
	fi
	wait "$1" 2>/dev/null
	STOP_RC=$?
}

stop_etcd() {
	stop_pid "$EPID" etcd
	EPID=
}

# start_host N: toggled hN on its own socket and state directory.
start_host() {
	local n=$1
	mkdir -p "$T/h$n"
	"$DAEMON" --socket "$T/h$n/sock" --state-dir "$T/h$n/state" $CL --host-id "h$n" \
		>>"$T/h$n/toggled.log" 2>&1 &
	DPIDS[$n]=$!
	for _ in $(seq 100); do
		[ -S "$T/h$n/sock" ] && return 0
		sleep 0.05
	done
	fail "toggled h$n did not listen in 5 s"
}


# host_agents_are N EXPR: every agent of hN (2 of them) satisfies the Python
# expression EXPR over a (the agent's JSON object from togglectl agents).
host_agents_are() {
	"$CTL" -s "$T/h$1/sock" --json agents >"$T/agents.$1.json" 2>/dev/null || return 1
	python3 - "$T/agents.$1.json" "$2" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
ags = d["agents"]
ok = len(ags) == 2 and all(eval(sys.argv[2], {}, {"a": a}) for a in ags)
sys.exit(0 if ok else 1)
EOF
}

all_hosts_are() {
	host_agents_are 1 "$1" && host_agents_are 2 "$1" && host_agents_are 3 "$1"
}

enabled_is() { # SPEC: the standing set and the agent applied it
	all_hosts_are "a['enabled'] == '$1' and a['applied_version'] == a['control_version']"
}

status_hosts() { # the host ids with a status key, sorted, comma-separated
	etcdctl --endpoints "$EURL" get --prefix --keys-only /graphtoggle/tc/status/ 2>/dev/null |
		sed -n 's|^/graphtoggle/tc/status/||p' | sort | paste -sd, -
}

status_is() { test "$(status_hosts)" = "$1"; }

ctl_cluster() {
	"$CTL" $CL "$@" >"$T/out" 2>"$T/err"
	RC=$?
	CHECKS=$((CHECKS + 1))
	if [ "$RC" != 0 ]; then
		fail "togglectl $CL $*: exit $RC"
		sed 's/^/  /' "$T/out" "$T/err" >&2
	fi
}

count_in_log() { grep -c -- "$2" "$T/h$1/toggled.log"; }

# gw OP ARGS: etcd's JSON gateway straight (keys etcdctl cannot write: a NUL,
# a newline; values read from files).  gw put KEY VALUE | gw txn KEY VALUE
# [KEY VALUE ...] (one transaction, one revision); KEY and VALUE are Python
# escapes ("\x00"), a VALUE of @FILE is that file's bytes.
gw() {
	python3 - "$EURL" "$@" <<'EOF2'
import base64, codecs, json, sys, urllib.request
url, op, args = sys.argv[1], sys.argv[2], sys.argv[3:]
def b(x):
    if x.startswith("@"):
        data = open(x[1:], "rb").read()
    else:
        data = codecs.decode(x, "unicode_escape").encode("latin-1")
    return base64.b64encode(data).decode()
puts = [{"request_put": {"key": b(args[i]), "value": b(args[i + 1])}} for i in range(0, len(args), 2)]
body = {"success": puts} if op == "txn" else puts[0]["request_put"]
req = urllib.request.Request(url + ("/v3/kv/txn" if op == "txn" else "/v3/kv/put"),
                             data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
json.load(urllib.request.urlopen(req, timeout=10))
EOF2
}

# ---- start --------------------------------------------------------------------
start_etcd
for n in 1 2 3; do start_host "$n"; done
for n in 1 2 3; do
	for k in 1 2; do
		"$AGENT" --backend sim --socket "$T/h$n/sock" --period-ms 5 --name "eng$k" \
			--group "g$k" >"$T/h$n/agent$k.log" 2>&1 &
		APIDS="$APIDS $!"
	done
done
wait_for 10 "every host has its 2 agents" all_hosts_are "a['step'] >= 0"
wait_for 10 "every host publishes its status" status_is h1,h2,h3

# ---- 1a. the heartbeat is the lease: an idle host's status is not rewritten --
# Its agents step (every 5 ms), which moved its status every second: a put
# a second per host, each a revision of etcd.  Now a status is put when
# what it says changes, steps and counters every 30 s; the lease's
# keep-alive keeps the key (12 s: past the lease's 10 s TTL).
status_version() {
	etcdctl --endpoints "$EURL" get /graphtoggle/tc/status/h1 -w json |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["kvs"][0]["version"])'
}
sv0=$(status_version)
sleep 12
sv1=$(status_version)
echo "cluster/run.sh: an idle host's status, 12 s: $((sv1 - sv0)) puts"
CHECKS=$((CHECKS + 1))
[ $((sv1 - sv0)) -le 1 ] || fail "an idle host put its status $((sv1 - sv0)) times in 12 s (at most 1)"
status_is h1,h2,h3 || fail "an idle host's status key went (its lease not kept alive)"

# ---- 1. a cluster set reaches every agent -----------------------------------
ctl_cluster set 'resid_post:0-3'
wait_for 5 "cluster set reaches every agent of every host" enabled_is 'resid_post:0-3'

# A host's set: only that host.
ctl_cluster set --target host:h2 'attn_out:*'
wait_for 5 "host:h2 set reaches h2's agents" host_agents_are 2 "a['enabled'] == 'attn_out:*'"
host_agents_are 1 "a['enabled'] == 'resid_post:0-3'" || fail "host:h2 set changed h1"
host_agents_are 3 "a['enabled'] == 'resid_post:0-3'" || fail "host:h2 set changed h3"

# A group across hosts.
ctl_cluster set --target group:g2 'mlp_out:5'
wait_for 5 "group:g2 set reaches g2 on every host" all_hosts_are \
	"(a['group'] != 'g2') or a['enabled'] == 'mlp_out:5'"

# A spec that does not parse is rejected on every host and reported there.
etcdctl --endpoints "$EURL" put /graphtoggle/tc/desired/set/all '{"hooks":"nosuchhook:1"}' >/dev/null
wait_for 5 "a bad spec is reported in every host's status" python3 -c "
import json, subprocess, sys
d = json.loads(subprocess.run(['$CTL'] + '$CL'.split() + ['--json', 'status'], capture_output=True).stdout)
sys.exit(0 if len(d['hosts']) == 3 and all(h['rejected'] >= 2 for h in d['hosts']) else 1)"
host_agents_are 1 "a['enabled'] in ('resid_post:0-3', 'mlp_out:5')" || fail "a bad spec changed an agent"

# ---- 2. plans: all entries per agent, a late one rejected and reported -------
echo '[{"step": "+100000", "hooks": "all"}, {"step": "+100001", "hooks": "none"}]' >"$T/plan.json"
ctl_cluster plan submit "$T/plan.json"
wait_for 5 "the plan is queued on every agent" all_hosts_are "a['pending_plan'] == 2"
echo '[{"step": 1, "hooks": "all"}]' >"$T/late.json"
ctl_cluster plan submit "$T/late.json"
wait_for 5 "a late plan is reported as rejected by every host" python3 -c "
import json, subprocess, sys
d = json.loads(subprocess.run(['$CTL'] + '$CL'.split() + ['--json', 'status'], capture_output=True).stdout)
sys.exit(0 if all(any('already begun step' in r['message'] for r in h['rejections'])
                   for h in d['hosts']) and len(d['hosts']) == 3 else 1)"
all_hosts_are "a['pending_plan'] == 2" || fail "a late plan left entries behind"

# ---- 2b. keys a host does not take: skipped, reported, the watch moves on ----
D=/graphtoggle/tc/desired
# Two keys in one transaction (one revision): both are applied (only the
# first of them was: the second compared equal to the revision just applied).
gw txn $D/set/host/h1 '{"hooks":"attn_out:1"}' $D/set/host/h2 '{"hooks":"attn_out:2"}' ||
	fail "gateway txn"
txn_keys_applied() {
	host_agents_are 1 "a['enabled'] == 'attn_out:1'" && host_agents_are 2 "a['enabled'] == 'attn_out:2'"
}
wait_for 5 "both keys of one transaction reach their hosts" txn_keys_applied

# togglectl refuses what a host would refuse (a value over 256 KiB: 64
# entries of 8 KiB specs), before it writes anything.
python3 -c '
import json
spec = ",".join(["resid_post:0"] * 630)
print(json.dumps([{"step": "+%d" % (1000 + i), "hooks": spec} for i in range(64)]))' >"$T/bigplan.json"
plans_before=$(etcdctl --endpoints "$EURL" get --prefix --keys-only $D/plan/ | grep -c .)
"$CTL" $CL plan submit "$T/bigplan.json" >"$T/out" 2>&1
rc=$?
CHECKS=$((CHECKS + 1))
[ "$rc" != 0 ] && grep -q "nothing written" "$T/out" ||
	fail "togglectl --etcd plan submit of a 64 x 8 KiB plan: exit $rc ($(head -c 200 "$T/out"))"
[ "$(etcdctl --endpoints "$EURL" get --prefix --keys-only $D/plan/ | grep -c .)" = "$plans_before" ] ||
	fail "the refused plan was written to etcd"

# Keys a host skips but that leave its watch alone even before: a key
# whose newline would forge a log line, an unknown key, 100 malformed plans
# at once (one transaction).  The log: cleaned, and rate-limited.
gw put "$D/plan/p\\ncluster: forged line" '{}' || fail "put a key with a newline"
gw put "$D/unknown" '{}' || fail "put an unknown key"
bulk=()
for i in $(seq 100); do bulk+=("$D/plan/bulk$i" 'not json'); done
gw txn "${bulk[@]}" || fail "put 100 malformed plans"
bulk_logged() { grep -q 'bulk' "$T/h$1/toggled.log"; }
for n in 1 2 3; do
	wait_for 5 "h$n reads the malformed plans" bulk_logged "$n"
done
sleep 0.5
for n in 1 2 3; do
	CHECKS=$((CHECKS + 1))
	if grep -q '^cluster: forged' "$T/h$n/toggled.log"; then
		fail "h$n: a key with a newline forged a log line"
	fi
	bulk_lines=$(grep -c 'bulk' "$T/h$n/toggled.log")
	[ "$bulk_lines" -le 12 ] ||
		fail "h$n: 100 malformed plan keys made $bulk_lines log lines (rate limit: 10 per 10 s)"
done
etcdctl --endpoints "$EURL" del --prefix $D/plan/bulk >/dev/null
etcdctl --endpoints "$EURL" del $D/unknown >/dev/null

# Limits count this host's keys only: 4,100 standing sets for agents of a
# host that is none of ours take none of h1's room for its own selectors.
python3 - "$EURL" <<'EOF2' || fail "writing 4,100 other-host keys"
import base64, json, sys, urllib.request
url = sys.argv[1]
b = lambda s: base64.b64encode(s.encode()).decode()
for t in range(41):
    ops = [{"request_put": {"key": b("/graphtoggle/tc/desired/set/agent/h9/%d" % (t * 100 + i + 1)),
                            "value": b('{"hooks":"all"}')}} for i in range(100)]
    req = urllib.request.Request(url + "/v3/kv/txn", data=json.dumps({"success": ops}).encode(),
                                 headers={"Content-Type": "application/json"})
    json.load(urllib.request.urlopen(req, timeout=10))
EOF2
ctl_cluster set --target host:h1 'mlp_out:3'
wait_for 10 "h1's own set with 4,100 other-host keys in etcd" \
	host_agents_are 1 "a['enabled'] == 'mlp_out:3'"
CHECKS=$((CHECKS + 1))
if grep -q 'too many standing-set keys' "$T/h1/toggled.log"; then
	fail "h1 counted another host's keys against its limit"
fi
etcdctl --endpoints "$EURL" del --prefix $D/set/agent/h9/ >/dev/null

# Keys that stopped a host's watch for good (it reconnected at the same
# revision, forever): the 64 x 8 KiB plan written by another writer, a key
# over 512 bytes, a key with a NUL, a value with a NUL.  Skipped, reported,
# and every later change applied.
python3 - "$T/bigplan.json" >"$T/bigplan.value" <<'EOF2'
import json, sys
es = json.load(open(sys.argv[1]))
print(json.dumps({"target": "all", "entries": [{"after": int(e["step"][1:]), "hooks": e["hooks"]} for e in es]}))
EOF2
gw put $D/plan/big @"$T/bigplan.value" || fail "put the big plan"
gw put "$D/set/host/$(head -c 600 /dev/zero | tr '\0' x)" '{"hooks":"all"}' || fail "put a long key"
gw put "$D/set/a\\x00ll" '{"hooks":"all"}' || fail "put a key with a NUL"
gw put "$D/set/all" '{"hooks":"all"}\x00x' || fail "put a value with a NUL"
ctl_cluster set 'resid_post:0-1'
wait_for 10 "a set after keys no host takes reaches every agent" enabled_is 'resid_post:0-1'
wait_for 5 "every host reports the skipped keys in its status" python3 -c "
import json, subprocess, sys
d = json.loads(subprocess.run(['$CTL'] + '$CL'.split() + ['--json', 'status'], capture_output=True).stdout)
sys.exit(0 if len(d['hosts']) == 3 and all(h.get('skipped', 0) >= 4 and
    any('skipped: key with a NUL byte' in r['message'] for r in h['rejections']) for h in d['hosts']) else 1)"
# In the log, or counted in the rate limit's line once its 10 s window ends.
nul_logged() {
	grep -q 'key with a NUL byte' "$T/h$1/toggled.log" ||
		grep -q 'more rejections not logged' "$T/h$1/toggled.log"
}
for n in 1 2 3; do
	wait_for 12 "h$n logs the key with a NUL (or the count of rejections not logged)" nul_logged "$n"
done
etcdctl --endpoints "$EURL" del $D/plan/big >/dev/null

# The cluster view: agents of every host, same JSON as one host's.
ctl_cluster --json agents
python3 - "$T/out" <<'EOF' || fail "togglectl --etcd --json agents: not 3 hosts x 2 agents"
import json, sys
d = json.load(open(sys.argv[1]))
hs = sorted(h["host"] for h in d["hosts"])
assert hs == ["h1", "h2", "h3"], hs
assert all(len(h["agents"]) == 2 and "enabled" in h["agents"][0] for h in d["hosts"])
EOF

# A host status whose rejections carry terminal escapes (whoever may write to
# etcd may write there): togglectl prints the host, its text cleaned.
etcdctl --endpoints "$EURL" get --print-value-only /graphtoggle/tc/status/h1 >"$T/h1status" ||
	fail "etcdctl get h1's status"
python3 - "$T/h1status" >"$T/evil" <<'EOF' || fail "forging a host status"
import json, sys
d = json.loads(open(sys.argv[1]).read())
d["host"] = "evil"
d["rejections"] = [{"key": "\x1b[2J/k", "revision": 1, "agent": "\x1b]0;pwned\x07", "message": "\x1b[31mred"},
                   {"key": 5, "revision": "x", "agent": ["a"], "message": None}]
sys.stdout.write(json.dumps(d))
EOF
etcdctl --endpoints "$EURL" put /graphtoggle/tc/status/evil <"$T/evil" >/dev/null || fail "put evil"
ctl_cluster status
grep -q "== host evil" "$T/out" || fail "togglectl --etcd status left out the forged host"
if tr -d '\n' <"$T/out" | LC_ALL=C grep -q '[[:cntrl:]]'; then
	fail "togglectl --etcd status printed a control byte from a host's status"
fi
CHECKS=$((CHECKS + 1))
etcdctl --endpoints "$EURL" del /graphtoggle/tc/status/evil >/dev/null

# One big host (a status over 256 KiB, as 82 agents x 64 graphs make) and
# one that is not a status: the others are shown, the broken one named
# (before, the big one made togglectl --etcd agents fail for every host).
python3 - "$T/h1status" >"$T/big" <<'EOF2' || fail "forging a big host status"
import json, sys
d = json.loads(open(sys.argv[1]).read())
d["host"] = "big"
d["pad"] = "x" * (300 << 10)
sys.stdout.write(json.dumps(d))
EOF2
etcdctl --endpoints "$EURL" put /graphtoggle/tc/status/big <"$T/big" >/dev/null || fail "put big"
etcdctl --endpoints "$EURL" put /graphtoggle/tc/status/broken 'not a status' >/dev/null
ctl_cluster --json agents
python3 - "$T/out" <<'EOF2' || fail "togglectl --etcd agents with a big and a broken host: $(head -c 300 "$T/err")"
import json, sys
hs = sorted(h["host"] for h in json.load(open(sys.argv[1]))["hosts"])
assert hs == ["big", "h1", "h2", "h3"], hs
EOF2
grep -q "status/broken: not a host status; left out" "$T/err" ||
	fail "togglectl did not name the broken host: $(head -c 300 "$T/err")"
CHECKS=$((CHECKS + 1))
etcdctl --endpoints "$EURL" del /graphtoggle/tc/status/big >/dev/null
etcdctl --endpoints "$EURL" del /graphtoggle/tc/status/broken >/dev/null

pending_first() { # hN: the pending plan entries of its first agent
	"$CTL" -s "$T/$1/sock" --json agents 2>/dev/null |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["agents"][0]["pending_plan"])'
}
# ---- 2c. old plan keys go: every plan is put under a lease (--plan-ttl) -------
# Never kept alive: etcd deletes the key after the TTL (default a day).
# The agents keep the entries they took; a host forgets the plan (an agent
# that joins later does not get it).  Before, plan keys stayed for ever.
plan_keys() { etcdctl --endpoints "$EURL" get --prefix --keys-only $D/plan/ | grep -c .; }
pk0=$(plan_keys)
"$CTL" $CL --plan-ttl 5 plan submit "$T/plan.json" >"$T/out" 2>&1
rc=$?
CHECKS=$((CHECKS + 1))
[ "$rc" != 0 ] && grep -q 'bad --plan-ttl' "$T/out" || fail "--plan-ttl 5 (under 10 s) was taken"
p1=$(pending_first h1)
echo '[{"step": "+500000", "hooks": "all"}]' >"$T/plan-ttl.json"
ctl_cluster --plan-ttl 10 plan submit --target host:h1 "$T/plan-ttl.json"
wait_for 5 "h1's agents take the plan with a lease" host_agents_are 1 "a['pending_plan'] == $p1 + 1"
lease=$(etcdctl --endpoints "$EURL" get --prefix $D/plan/ -w json | python3 -c '
import json, sys
print(max(kv.get("lease", 0) for kv in json.load(sys.stdin)["kvs"]))')
CHECKS=$((CHECKS + 1))
[ "$lease" != 0 ] || fail "the plan key was put without a lease"
plan_keys_are() { test "$(plan_keys)" = "$1"; }
wait_for 20 "the plan's key goes with its lease" plan_keys_are "$pk0"
host_agents_are 1 "a['pending_plan'] == $p1 + 1" || fail "h1's agents lost the entries of an expired plan key"

# ---- 3. kill -9 a toggled, change the state, restart: it catches up ---------
ctl_cluster set 'resid_post:1'
wait_for 5 "set before the kill" enabled_is 'resid_post:1'
saved=$(cat "$T/h3/state/cluster-tc.rev")
kill -9 "${DPIDS[3]}"
wait "${DPIDS[3]}" 2>/dev/null
DPIDS[3]=
ctl_cluster set 'resid_post:2'
ctl_cluster set --target host:h3 'attn_out:7'
echo '[{"step": "+200000", "hooks": "all"}]' >"$T/plan3.json"
ctl_cluster plan submit --target host:h3 "$T/plan3.json"
# Its lease ends: its status key goes (TTL 10 s).
wait_for 20 "the dead host's status disappears with its lease" status_is h1,h2
# Every status h3 puts from its restart on, to check the first one's revision.
etcdctl --endpoints "$EURL" watch /graphtoggle/tc/status/h3 -w json >"$T/h3-status.watch" 2>&1 &
SWATCH=$!
APIDS="$APIDS $SWATCH"
want_rev=$(etcdctl --endpoints "$EURL" get --prefix /graphtoggle/tc/desired/ -w json | python3 -c '
import json, sys
print(max(kv["mod_revision"] for kv in json.load(sys.stdin)["kvs"]))')
sleep 0.3
t0=$(date +%s%N)
start_host 3
wait_for 10 "restarted h3 catches up: the host set and the plan written while it was dead" \
	host_agents_are 3 "a['enabled'] == 'attn_out:7' and a['pending_plan'] == 3"
t1=$(date +%s%N)
echo "cluster/run.sh: h3 caught up $(((t1 - t0) / 1000000)) ms after its restart (agents reconnect included)"
grep -q "applied revision $saved)" "$T/h3/toggled.log" ||
	fail "h3 did not start from its saved revision $saved"
[ "$(count_in_log 3 'full resync')" = 0 ] || fail "h3 resynced instead of catching up from its revision"
host_agents_are 1 "a['enabled'] == 'resid_post:2'" || fail "h1 lost the set made while h3 was down"
wait_for 15 "h3 publishes its status again" status_is h1,h2,h3
sleep 0.5
kill "$SWATCH" 2>/dev/null
wait "$SWATCH" 2>/dev/null
# Its first status after the restart shows the revision it caught up to,
# not its saved one of before (which it showed for the first second).
first_rev=$(python3 - "$T/h3-status.watch" <<'EOF2'
import base64, json, sys
text, dec, i = open(sys.argv[1]).read(), json.JSONDecoder(), 0
while i < len(text):
    if text[i].isspace():
        i += 1
        continue
    try:
        obj, i = dec.raw_decode(text, i)
    except ValueError:
        break
    for ev in obj.get("Events") or []:
        if ev.get("type", "PUT") in ("PUT", 0) and ev["kv"].get("value"):
            print(json.loads(base64.b64decode(ev["kv"]["value"]))["revision"])
            sys.exit(0)
print("none")
EOF2
)
echo "cluster/run.sh: h3's first status after its restart: revision $first_rev (caught up to $want_rev)"
CHECKS=$((CHECKS + 1))
[ "$first_rev" = "$want_rev" ] ||
	fail "h3's first status after its restart shows revision $first_rev, not $want_rev (caught up)"

# ---- 3b. a crash between the save and the revision file: each plan once -----
# h2's revision file cannot be written (a directory where its temporary file
# goes), so the window between the save of a plan and the revision file
# stays open; kill -9 there: the restart replays the plan, which must not
# reach the agents a second time (a relative plan ran at two steps).
pending_of() { # hN: the pending plan entries of its first agent
	"$CTL" -s "$T/$1/sock" --json agents 2>/dev/null |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["agents"][0]["pending_plan"])'
}
mkdir "$T/h2/state/cluster-tc.rev.tmp"
before=$(pending_of h2)
echo '[{"step": "+300000", "hooks": "all"}]' >"$T/plan4.json"
ctl_cluster plan submit --target host:h2 "$T/plan4.json"
wait_for 5 "h2's agents take the plan" host_agents_are 2 "a['pending_plan'] == $before + 1"
wait_for 5 "h2 cannot write its revision file" grep -q "writing revision" "$T/h2/toggled.log"
kill -9 "${DPIDS[2]}"
wait "${DPIDS[2]}" 2>/dev/null
rmdir "$T/h2/state/cluster-tc.rev.tmp"
start_host 2
wait_for 10 "h2 restarted with its agents" host_agents_are 2 "a['step'] >= 0"
wait_for 5 "h2 replayed from its old revision" grep -q "watching etcd" "$T/h2/toggled.log"
sleep 1
host_agents_are 2 "a['pending_plan'] == $before + 1" ||
	fail "h2's agents hold $(pending_of h2) pending entries after the replay, expected $((before + 1)) (a plan applied twice)"
CHECKS=$((CHECKS + 1))

# ---- 3c. an agent that joins late: absolute plans, not relative ones ---------
echo '[{"step": "+400000", "hooks": "none"}]' >"$T/rel.json"
echo '[{"step": 2000000000, "hooks": "all"}]' >"$T/abs.json"
before=$(pending_of h1)
ctl_cluster plan submit --target host:h1 "$T/rel.json"
ctl_cluster plan submit --target host:h1 "$T/abs.json"
wait_for 5 "h1's agents take both plans" host_agents_are 1 "a['pending_plan'] == $before + 2"
"$AGENT" --backend sim --socket "$T/h1/sock" --period-ms 5 --name late1 --group g9 \
	>"$T/h1/late1.log" 2>&1 &
LATE=$!
APIDS="$APIDS $LATE"
late_is() {
	"$CTL" -s "$T/h1/sock" --json agents 2>/dev/null | python3 -c "
import json, sys
a = [x for x in json.load(sys.stdin)['agents'] if x['name'] == 'late1']
sys.exit(0 if a and a[0]['step'] >= 0 and $1 else 1)"
}
wait_for 10 "late1 joins h1" late_is True
sleep 0.5
late_is "a[0]['pending_plan'] == 1" ||
	fail "late1 (joined after both plans) holds $("$CTL" -s "$T/h1/sock" --json agents |
		python3 -c 'import json,sys; print([x["pending_plan"] for x in json.load(sys.stdin)["agents"] if x["name"] == "late1"])') pending entries; the rule: the absolute plan (1), not the relative one"
CHECKS=$((CHECKS + 1))
kill "$LATE"
wait "$LATE" 2>/dev/null
wait_for 5 "late1 leaves h1" host_agents_are 1 "a['step'] >= 0"

# ---- 4. etcd restarted: every toggled reconnects -------------------------------
watching() { grep -c 'cluster: watching etcd' "$T/h$1/toggled.log"; }
reconnected() { test "$(watching "$1")" -gt "$2"; }
before=(x "$(watching 1)" "$(watching 2)" "$(watching 3)")
stop_etcd
start_etcd
for n in 1 2 3; do
	wait_for 10 "h$n reconnects to the restarted etcd" reconnected "$n" "${before[$n]}"
done
ctl_cluster set 'resid_post:3'
wait_for 5 "a set after the etcd restart reaches every agent" enabled_is 'resid_post:3'

# ---- 5. compaction: a saved revision etcd no longer has -> full resync ------
kill -9 "${DPIDS[1]}"
wait "${DPIDS[1]}" 2>/dev/null
DPIDS[1]=
ctl_cluster set 'resid_post:4'
ctl_cluster set --target host:h1 'attn_out:9'
rev=$(etcdctl --endpoints "$EURL" get /graphtoggle/tc/desired/set/all -w json |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["header"]["revision"])')
etcdctl --endpoints "$EURL" compact "$rev" >/dev/null || fail "etcdctl compact $rev"
start_host 1
wait_for 10 "h1 resyncs after compaction and gets the host set" \
	host_agents_are 1 "a['enabled'] == 'attn_out:9'"
[ "$(count_in_log 1 'full resync')" = 1 ] ||
	fail "compaction: 'full resync' logged $(count_in_log 1 'full resync') times in h1's log, expected once"
host_agents_are 2 "a['enabled'] == 'resid_post:4'" || fail "h2 missed the set made during compaction"
[ "$(cat "$T/h1/state/cluster-tc.rev")" -ge "$rev" ] || fail "h1 did not save the resynced revision"

# ---- 6. etcd stopped: local requests are answered; the cluster resumes ------
stop_etcd
sleep 0.5
"$CTL" -s "$T/h2/sock" set 'mlp_out:0' >"$T/out" 2>&1 || fail "local set with etcd down: $(cat "$T/out")"
wait_for 5 "a local set with etcd down reaches h2's agents" \
	host_agents_are 2 "a['enabled'] == 'mlp_out:0' and a['applied_version'] == a['control_version']"
"$CTL" -s "$T/h2/sock" status >/dev/null 2>&1 || fail "local status with etcd down"
wait_for 10 "h2 logs that etcd is unreachable" grep -q "etcd unreachable" "$T/h2/toggled.log"
sleep 2
n_down=$(grep -c "etcd unreachable" "$T/h2/toggled.log")
start_etcd
ctl_cluster set 'resid_post:5'
wait_for 10 "the cluster resumes after etcd is back" enabled_is 'resid_post:5'
[ "$n_down" -le 2 ] || fail "'etcd unreachable' logged $n_down times in one outage (expected once)"

# ---- 7. a failed save: nothing reaches the agents, the revision stays --------
# h4 keeps its state on a 512 KiB tmpfs of its own (a private mount
# namespace), which is then filled: a cluster set is accepted, its save
# fails, and it must not reach h4's agents (durable before visible) nor
# move cluster-tc.rev; once there is room again it is re-applied and the
# revision follows.  Needs root (mount); CI runs as root.
# -r: the target's root too (setns to a mount namespace resets the root, which
# matters inside a chroot such as scripts/fresh-check.sh's)
in_h4() { nsenter -t "${DPIDS[4]}" -m -r "$@"; }
set_rev() { # the mod revision of desired/set/all
	etcdctl --endpoints "$EURL" get /graphtoggle/tc/desired/set/all -w json |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["kvs"][0]["mod_revision"])'
}
h4_rev() { in_h4 cat "$T/h4/state/cluster-tc.rev" 2>/dev/null || echo 0; }
rev_at_least() { test "$(h4_rev)" -ge "$1"; }
if [ "$(id -u)" != 0 ]; then
	skip "cluster/run.sh 7 (a failed save in a cluster): needs root for a tmpfs" root
elif ! unshare -m --propagation private true 2>/dev/null; then
	skip "cluster/run.sh 7 (a failed save in a cluster): unshare -m refused here (in a chroot: / is not a mount point)"
else
	mkdir -p "$T/h4/state"
	unshare -m --propagation private sh -c \
		'mount -t tmpfs -o size=512k,mode=0700 tmpfs "$1" && shift && exec "$@"' sh \
		"$T/h4/state" "$DAEMON" --socket "$T/h4/sock" --state-dir "$T/h4/state" $CL \
		--host-id h4 >>"$T/h4/toggled.log" 2>&1 &
	DPIDS[4]=$!
	for k in 1 2; do
		"$AGENT" --backend sim --socket "$T/h4/sock" --period-ms 5 --name "eng$k" \
			--group "g$k" >"$T/h4/agent$k.log" 2>&1 &
		APIDS="$APIDS $!"
	done
	wait_for 10 "h4 (state on a tmpfs) has its 2 agents" host_agents_are 4 "a['step'] >= 0"
	ctl_cluster set 'resid_post:6'
	wait_for 5 "a cluster set reaches h4" host_agents_are 4 \
		"a['enabled'] == 'resid_post:6' and a['applied_version'] == a['control_version']"
	wait_for 5 "h4 saves the revision of that set" rev_at_least "$(set_rev)"
	in_h4 dd if=/dev/zero of="$T/h4/state/filler" bs=4096 2>/dev/null
	# The journal's last page may take a few more records: put alternate
	# sets until h4 logs that a save failed.
	spec=
	for i in $(seq 40); do
		spec="resid_post:$((6 + i % 2))"
		ctl_cluster set "$spec"
		for _ in $(seq 40); do
			grep -q "cannot save the desired state" "$T/h4/toggled.log" && break 2
			host_agents_are 4 "a['enabled'] == '$spec' and a['applied_version'] == a['control_version']" &&
				break
			sleep 0.05
		done
	done
	CHECKS=$((CHECKS + 1))
	if ! grep -q "cannot save the desired state" "$T/h4/toggled.log"; then
		fail "h4's save never failed on a full tmpfs"
	else
		failed_rev=$(set_rev)
		sleep 2.5 # two re-applications at least, each failing again
		host_agents_are 1 "a['enabled'] == '$spec'" || fail "h1 did not get the set h4 could not save"
		# The agents never run a version the daemon does not hold durably
		# (every sample); the accepted set is the old one (but for the
		# moment of each re-application: most samples).
		held=0
		for _ in $(seq 5); do
			host_agents_are 4 "a['applied_version'] <= a['control_version']" ||
				fail "h4's agents applied a version whose save failed (visible before durable)"
			host_agents_are 4 "a['enabled'] != '$spec'" && held=$((held + 1))
			sleep 0.2
		done
		[ "$held" -ge 3 ] || fail "h4 shows $spec, whose save failed, in $((5 - held)) of 5 samples"
		[ "$(h4_rev)" -lt "$failed_rev" ] ||
			fail "h4 saved revision $(h4_rev) >= $failed_rev, whose save failed"
		in_h4 rm -f "$T/h4/state/filler"
		wait_for 10 "h4 re-applies the set once it can save again" host_agents_are 4 \
			"a['enabled'] == '$spec' and a['applied_version'] == a['control_version']"
		wait_for 5 "h4's saved revision follows once durable" rev_at_least "$failed_rev"
	fi
fi

# ---- 8. a 3-member etcd: a member cut from its peers, a hung member ------------
# Members m2, m3 and two toggled (hp1, hp2, 2 agents each) in network
# namespace A; member m1 alone in namespace B, reached over two veth links:
# one for raft between members, one for clients.  The hosts list m1 first.
# Cutting the raft link leaves m1 reachable but without a leader; SIGSTOP
# leaves a member whose kernel still holds its connections.  Each time every
# agent must get a change written meanwhile within 10 s, without an operator.
in_a() { ip netns exec "$NSA" "$@"; }
in_b() { ip netns exec "$NSB" "$@"; }
M1=http://10.211.2.2:2379 M2=http://127.0.0.1:2379 M3=http://127.0.0.1:2479
MEND=$M1,$M2,$M3
MCL="--etcd $MEND --cluster tm"
MCLUSTER=m1=http://10.211.1.2:2380,m2=http://10.211.1.1:2380,m3=http://10.211.1.1:2480
start_member() { # NAME NS CLIENT PEER
	local name=$1 ns=$2 client=$3 peer=$4
	ip netns exec "$ns" etcd --name "$name" --data-dir "$T/$name" --listen-client-urls "$client" \
		--advertise-client-urls "$client" --listen-peer-urls "$peer" \
		--initial-advertise-peer-urls "$peer" --initial-cluster "$MCLUSTER" \
		--initial-cluster-token tgclu --initial-cluster-state new >>"$T/$name.log" 2>&1 &
	MPIDS="$MPIDS $!"
	eval "PID_$name=$!"
}
members_healthy() { in_a etcdctl --endpoints "$MEND" --command-timeout=2s endpoint health; }
watched_member() { # hpN: the member its status says it watches
	in_a "$CTL" $MCL --json status 2>/dev/null | python3 -c "
import json, sys
d = json.load(sys.stdin)
print(*[h.get('etcd', {}).get('member', '$M1') for h in d['hosts'] if h['host'] == '$1'])"
}
# set_during_fault SPEC ENDPOINTS: write through the healthy members (a new
# leader may take a moment: bounded retries).
set_during_fault() {
	local i
	for i in $(seq 20); do
		in_a "$CTL" --etcd "$2" --cluster tm set "$1" >"$T/out" 2>&1 && return 0
		sleep 0.5
	done
	fail "togglectl set $1 through $2: $(cat "$T/out")"
	return 1
}
agents_have() { host_agents_are p1 "a['enabled'] == '$1'" && host_agents_are p2 "a['enabled'] == '$1'"; }
# updated_within SECS SPEC T0 WHAT: every agent has SPEC within SECS of T0 (ns).
updated_within() {
	local left=$(( $1 - ($(date +%s%N) - $3) / 1000000000 ))
	[ "$left" -lt 1 ] && left=1
	wait_for "$left" "$4" agents_have "$2"
	echo "cluster/run.sh: $4: $(( ($(date +%s%N) - $3) / 1000000 )) ms"
}

if [ "$(id -u)" != 0 ]; then
	skip "cluster/run.sh 8 (a 3-member etcd in network namespaces): needs root" root
elif ! ip netns add "$NSA" 2>/dev/null || ! ip netns add "$NSB" 2>/dev/null; then
	skip "cluster/run.sh 8 (a 3-member etcd in network namespaces): ip netns add refused" root
	ip netns del "$NSA" 2>/dev/null
else
	NS_MADE=1
	in_a ip link set lo up
	in_b ip link set lo up
	in_a ip link add tgraft type veth peer name tgraft netns "$NSB"
	in_a ip link add tgcli type veth peer name tgcli netns "$NSB"
	in_a ip addr add 10.211.1.1/24 dev tgraft
	in_a ip addr add 10.211.2.1/24 dev tgcli
	in_b ip addr add 10.211.1.2/24 dev tgraft
	in_b ip addr add 10.211.2.2/24 dev tgcli
	for l in tgraft tgcli; do in_a ip link set "$l" up; in_b ip link set "$l" up; done
	start_member m1 "$NSB" "$M1" http://10.211.1.2:2380
	start_member m2 "$NSA" "$M2" http://10.211.1.1:2380
	start_member m3 "$NSA" "$M3" http://10.211.1.1:2480
	wait_for 20 "the 3 members are healthy" members_healthy
	for n in 1 2; do
		mkdir -p "$T/hp$n"
		# ip netns exec execs the daemon: $! is its pid (a function run in
		# the background would be a subshell's, and the daemon would outlive it).
		ip netns exec "$NSA" "$DAEMON" --socket "$T/hp$n/sock" --state-dir "$T/hp$n/state" $MCL \
			--host-id "p$n" --metrics "$T/hp$n/metrics.sock" >>"$T/hp$n/toggled.log" 2>&1 &
		MPIDS="$MPIDS $!"
		for k in 1 2; do
			"$AGENT" --backend sim --socket "$T/hp$n/sock" --period-ms 5 --name "eng$k" \
				>"$T/hp$n/agent$k.log" 2>&1 &
			APIDS="$APIDS $!"
		done
	done
	agents_up() { host_agents_are p1 "a['step'] >= 0" && host_agents_are p2 "a['step'] >= 0"; }
	wait_for 15 "hp1 and hp2 have their agents" agents_up
	set_during_fault 'resid_post:1' "$MEND"
	wait_for 10 "a set through the 3 members reaches every agent" agents_have 'resid_post:1'

	# Idle hosts keep their connections: over 10 s of status puts and lease
	# keep-alives, no client connection closed (each request had its own
	# before).  Only the members' client ports: raft's are the members'.
	tw() {
		echo $(( $(in_a ss -Htan state time-wait '( sport = :2379 or dport = :2379 or sport = :2479 or dport = :2479 )' | wc -l) +
			 $(in_b ss -Htan state time-wait '( sport = :2379 or dport = :2379 )' | wc -l) ))
	}
	tw0=$(tw)
	sleep 10
	tw1=$(tw)
	echo "cluster/run.sh: 2 idle hosts, 10 s: $((tw1 - tw0)) new TIME_WAIT sockets"
	CHECKS=$((CHECKS + 1))
	[ $((tw1 - tw0)) -le 0 ] || fail "2 idle hosts closed $((tw1 - tw0)) etcd connections in 10 s"
	for n in 1 2; do
		pid=$(in_a ss -Htnp state established | grep -o 'toggled-san",pid=[0-9]*' | sort -u |
			sed -n "${n}p" | sed 's/.*pid=//')
		nc=$(in_a ss -Htnp state established | grep -c "pid=$pid,")
		echo "cluster/run.sh: an idle host holds $nc etcd connections"
		CHECKS=$((CHECKS + 1))
		# The watch's stream, and the status thread's connection to the
		# same member, which also carries the watch's liveness checks (3
		# before: the checks had a connection of their own).
		[ "$nc" -le 2 ] || fail "an idle host holds $nc etcd connections (at most 2: watch, status)"
	done

	# A member cut from its peers: reachable, without a leader.
	t0=$(date +%s%N)
	in_b ip link set tgraft down
	set_during_fault 'resid_post:2' "$M2,$M3"
	updated_within 10 'resid_post:2' "$t0" "every agent updated after m1 was cut from its peers"
	for n in 1 2; do
		CHECKS=$((CHECKS + 1))
		[ "$(watched_member "p$n")" != "$M1" ] ||
			fail "p$n's status still names m1 as the member it watches"
	done
	in_a "$CTL" $MCL status >"$T/out" 2>&1
	grep -q "^etcd      watching http://127.0.0.1:2[34]79 since .*, [1-9][0-9]* failovers" "$T/out" ||
		fail "togglectl --etcd status does not show the member each host watches now"
	# The same, locally: togglectl status on the host, and its /metrics.
	"$CTL" -s "$T/hp1/sock" status >"$T/out" 2>&1
	CHECKS=$((CHECKS + 1))
	grep -q "^etcd  *watching http://127.0.0.1:2[34]79 since .*, [1-9][0-9]* failovers; last error: ." "$T/out" ||
		fail "local togglectl status does not show the watched member, since when and the last error ($(grep etcd "$T/out"))"
	metrics_of() { # hpN: its /metrics (a Unix socket, HTTP/1.0)
		python3 - "$T/$1/metrics.sock" <<'EOF2'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
s.sendall(b"GET /metrics HTTP/1.0\r\nHost: toggled\r\n\r\n")
data = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    data += b
print(data.split(b"\r\n\r\n", 1)[1].decode())
EOF2
	}
	metrics_of hp1 >"$T/metrics.txt" 2>&1
	CHECKS=$((CHECKS + 1))
	grep -q '^graphtoggle_cluster_watch_up{member="http://127.0.0.1:2[34]79"} 1$' "$T/metrics.txt" &&
		grep -q '^graphtoggle_cluster_watch_member_since_seconds{member="http://127.0.0.1:2[34]79"} [1-9]' "$T/metrics.txt" &&
		grep -q '^graphtoggle_cluster_watch_failovers_total [1-9]' "$T/metrics.txt" &&
		grep -q '^graphtoggle_cluster_watch_last_error_info{error=".' "$T/metrics.txt" ||
		fail "/metrics does not show the watched member, since when and the last error ($(grep cluster_watch "$T/metrics.txt" | head -5))"
	in_b ip link set tgraft up
	wait_for 20 "m1 rejoins its peers" members_healthy

	# A hung member: SIGSTOP the one the hosts watch now.
	hung=$(watched_member p1)
	case $hung in $M1) hung_pid=$PID_m1 ;; $M2) hung_pid=$PID_m2 ;; *) hung_pid=$PID_m3 ;; esac
	others=$(echo "$M1,$M2,$M3" | tr , '\n' | grep -vx "$hung" | paste -sd, -)
	t0=$(date +%s%N)
	kill -STOP "$hung_pid"
	set_during_fault 'resid_post:3' "$others"
	updated_within 10 'resid_post:3' "$t0" "every agent updated after the watched member ($hung) hung"
	kill -CONT "$hung_pid"
	for n in 1 2; do
		lost=$(grep -c 'etcd unreachable or unfit' "$T/hp$n/toggled.log")
		CHECKS=$((CHECKS + 1))
		[ "$lost" -le 4 ] || fail "p$n logged $lost lost watches for 2 faults (once per episode)"
	done
	for p in $MPIDS; do kill "$p" 2>/dev/null; done
	for p in $MPIDS; do wait "$p" 2>/dev/null; done
	for p in $MPIDS; do
		CHECKS=$((CHECKS + 1))
		! kill -0 "$p" 2>/dev/null || fail "process $p of section 8 outlived its SIGTERM"
	done
	MPIDS=
	for n in 1 2; do
		CHECKS=$((CHECKS + 1))
		if grep -q "ERROR: AddressSanitizer\|runtime error:" "$T/hp$n/toggled.log"; then
			fail "sanitizer report in hp$n's log"
		fi
	done
fi

# ---- 9. etcd with TLS, client certificates and users ---------------------------
# A CA, a server certificate (127.0.0.1) and a client certificate made here;
# etcd requires a client certificate (--client-cert-auth) and, with auth on,
# a token of user tg (whose role may only touch /graphtoggle/ts/); the
# client certificate has no CommonName (etcd's gateway refuses one: it
# cannot authenticate by it); tokens
# live 3 s (--auth-token-ttl), so every call after a pause must renew its
# token.  The password is only in a 0600 file, never on a command line nor
# in a log.
PKI=$T/pki
mkdir -p "$PKI"
mkcert() { # NAME SUBJECT [SAN]: NAME.key and NAME.crt signed by the CA
	openssl req -newkey rsa:2048 -nodes -keyout "$PKI/$1.key" -subj "$2" \
		-out "$PKI/$1.csr" 2>/dev/null &&
	if [ -n "${3:-}" ]; then printf 'subjectAltName=%s\n' "$3" >"$PKI/$1.ext"; else : >"$PKI/$1.ext"; fi &&
	openssl x509 -req -in "$PKI/$1.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
		-days 2 -extfile "$PKI/$1.ext" -out "$PKI/$1.crt" 2>/dev/null
}
if ! command -v openssl >/dev/null 2>&1; then
	fail "openssl is not installed (the TLS test makes its certificates)"
elif ! openssl req -x509 -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -subj "/CN=tgclu-ca" \
	-days 2 -out "$PKI/ca.crt" 2>/dev/null || ! mkcert server /CN=127.0.0.1 IP:127.0.0.1 ||
	! mkcert client /O=graphtoggle; then
	fail "making the test certificates"
else
	read -r SPORT SPPORT < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
	SURL=https://127.0.0.1:$SPORT
	etcd --name s --data-dir "$T/etcd-tls" --listen-client-urls "$SURL" --advertise-client-urls "$SURL" \
		--listen-peer-urls "http://127.0.0.1:$SPPORT" --initial-advertise-peer-urls "http://127.0.0.1:$SPPORT" \
		--initial-cluster "s=http://127.0.0.1:$SPPORT" --cert-file "$PKI/server.crt" \
		--key-file "$PKI/server.key" --trusted-ca-file "$PKI/ca.crt" --client-cert-auth \
		--auth-token-ttl 3 >>"$T/etcd-tls.log" 2>&1 &
	MPIDS="$MPIDS $!"
	ETLS=(etcdctl --endpoints "$SURL" --cacert "$PKI/ca.crt" --cert "$PKI/client.crt" --key "$PKI/client.key")
	wait_for 10 "etcd with TLS is healthy" "${ETLS[@]}" --command-timeout=1s endpoint health
	{ "${ETLS[@]}" user add root:rootpw && "${ETLS[@]}" user add tg:tgpw-secret-1 &&
	  "${ETLS[@]}" role add tg && "${ETLS[@]}" role grant-permission tg --prefix=true readwrite /graphtoggle/ts/ &&
	  "${ETLS[@]}" user grant-role tg tg && "${ETLS[@]}" auth enable; } >"$T/etcd-auth.out" 2>&1 ||
		fail "setting up etcd users: $(cat "$T/etcd-auth.out")"
	printf 'ca = %s\ncert = %s\nkey = %s\nuser = tg\npassword = tgpw-secret-1\n' "$PKI/ca.crt" \
		"$PKI/client.crt" "$PKI/client.key" >"$T/creds"
	chmod 644 "$T/creds"
	"$CTL" --etcd "$SURL" --cluster ts --etcd-credentials "$T/creds" status >"$T/out" 2>&1
	CHECKS=$((CHECKS + 1))
	grep -q "may be read by group or others" "$T/out" ||
		fail "togglectl took a password file others may read: $(head -c 300 "$T/out")"
	chmod 600 "$T/creds"
	mkdir -p "$T/hs1"
	"$DAEMON" --socket "$T/hs1/sock" --state-dir "$T/hs1/state" --etcd "$SURL" --cluster ts \
		--host-id s1 --etcd-credentials "$T/creds" >>"$T/hs1/toggled.log" 2>&1 &
	MPIDS="$MPIDS $!"
	for k in 1 2; do
		"$AGENT" --backend sim --socket "$T/hs1/sock" --period-ms 5 --name "eng$k" \
			>"$T/hs1/agent$k.log" 2>&1 &
		APIDS="$APIDS $!"
	done
	STL="--etcd $SURL --cluster ts --etcd-credentials $T/creds"
	wait_for 10 "s1 has its agents" host_agents_are s1 "a['step'] >= 0"
	"$CTL" $STL set 'resid_post:4' >"$T/out" 2>&1 || fail "togglectl set through TLS and auth: $(cat "$T/out")"
	wait_for 10 "a set through TLS and auth reaches s1's agents" host_agents_are s1 "a['enabled'] == 'resid_post:4'"
	sleep 5 # every token has expired
	"$CTL" $STL set 'resid_post:5' >"$T/out" 2>&1 || fail "togglectl set after the token TTL: $(cat "$T/out")"
	wait_for 10 "a set after the token TTL reaches s1's agents" host_agents_are s1 "a['enabled'] == 'resid_post:5'"
	s1_published() { "$CTL" $STL --json status 2>/dev/null | grep -q '"host": "s1"'; }
	wait_for 15 "s1 keeps its status published past the token TTL" s1_published
	sleep 11 # past the lease: only a renewed token keeps the lease alive
	CHECKS=$((CHECKS + 1))
	s1_published || fail "s1's status went with its lease (its token was not renewed)"
	# Without credentials etcd refuses us (so the test above used them).
	CHECKS=$((CHECKS + 1))
	if "$CTL" --etcd "$SURL" --cluster ts status >/dev/null 2>&1; then
		fail "togglectl without credentials was answered by an etcd that requires them"
	fi
	CHECKS=$((CHECKS + 1))
	if grep -q "tgpw-secret-1" "$T/hs1/toggled.log"; then
		fail "the password is in toggled's log"
	fi
	for p in $MPIDS; do kill "$p" 2>/dev/null; done
	for p in $MPIDS; do wait "$p" 2>/dev/null; done
	MPIDS=
	CHECKS=$((CHECKS + 1))
	if grep -q "ERROR: AddressSanitizer\|runtime error:" "$T/hs1/toggled.log"; then
		fail "sanitizer report in s1's log"
	fi
fi

# ---- the end: every toggled still alive, stops cleanly (ASan reports) --------
for n in 1 2 3 4; do
	[ -z "${DPIDS[$n]:-}" ] && [ "$n" = 4 ] && continue
	if ! kill -0 "${DPIDS[$n]}" 2>/dev/null; then
		fail "toggled h$n died (see $T/h$n/toggled.log)"
		continue
	fi
	stop_pid "${DPIDS[$n]}" "toggled h$n"
	DPIDS[$n]=
	[ "$STOP_RC" = 0 ] || fail "toggled h$n exited $STOP_RC at SIGTERM (see $T/h$n/toggled.log)"
	if grep -q "ERROR: AddressSanitizer\|runtime error:" "$T/h$n/toggled.log"; then
		fail "sanitizer report in h$n's log"
	fi
done

echo "cluster/run.sh: $CHECKS checks, $FAILS failed"
[ "$FAILS" = 0 ]
