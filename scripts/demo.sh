#!/bin/sh
# demo.sh - the README's first command (make demo): toggled on a private
# socket and state directory, an example inference agent replaying captured
# graphs, and a scripted operator changing hooks with togglectl, step by step.
# Everything is stopped at the end; the exit status says whether every step's
# producers matched the gate (the agent checks that itself, every step).
set -eu
B=${B:-build}
D=$(mktemp -d /tmp/graphtoggle-demo.XXXXXX)
SOCK=$D/toggled.sock
DAEMON_PID="" AGENT_PID=""

cleanup() {
	[ -n "$AGENT_PID" ] && kill "$AGENT_PID" 2>/dev/null || true
	[ -n "$DAEMON_PID" ] && kill "$DAEMON_PID" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$D"
}
trap cleanup EXIT INT TERM

if [ -t 1 ]; then BOLD=$(printf '\033[1m') PLAIN=$(printf '\033[0m'); else BOLD="" PLAIN=""; fi
say() { printf '\n%s== %s%s\n' "$BOLD" "$*" "$PLAIN"; }
ctl() {
	printf '$ togglectl %s\n' "$*"
	"$B/togglectl" --socket "$SOCK" "$@"
}
# Lines the agent printed since the last call: what the replays ran.
seen=0
agent_says() {
	sleep "${1:-0.3}"
	total=$(wc -l <"$D/agent.log")
	tail -n +"$((seen + 1))" "$D/agent.log" | head -n "$((total - seen))" | sed 's/^/   agent | /'
	seen=$total
}
current_step() {
	"$B/togglectl" --socket "$SOCK" --json agents |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["agents"][0]["step"])'
}

say "start toggled on $SOCK"
"$B/toggled" --socket "$SOCK" --state-dir "$D/state" 2>"$D/toggled.log" &
DAEMON_PID=$!
i=0
until "$B/togglectl" --socket "$SOCK" status >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -lt 100 ] || { cat "$D/toggled.log"; exit 1; }; sleep 0.05
done
ctl status

say "start an inference agent: 3 captured graphs (batch 1, 8, 32) x 32 layers x 3 hook types"
"$B/examples/demo_agent" --socket "$SOCK" --period-ms 20 --name engine-0 --group decode \
	>"$D/agent.log" 2>&1 &
AGENT_PID=$!
i=0
until "$B/togglectl" --socket "$SOCK" agents 2>/dev/null | grep -q engine-0; do
	i=$((i + 1)); [ $i -lt 100 ] || { cat "$D/agent.log"; exit 1; }; sleep 0.05
done
agent_says 0.2
ctl agents

say "enable a range of layers; --wait returns once a replay ran it"
ctl set 'resid_post:0-7' --wait
agent_says
ctl enable 'attn_out:*' --wait
agent_says

say "a per-step plan: two future steps get their own sets (+N: N steps from the agent's current one)"
cat >"$D/plan.json" <<PLAN
[{"step": "+25", "hooks": "mlp_out:31"},
 {"step": "+26", "hooks": "all"}]
PLAN
cat "$D/plan.json"
ctl plan submit "$D/plan.json"
ctl plan show
agent_says 1.0

say "a plan for a step that has already begun is refused, nothing of it applied"
step=$(current_step)
printf '[{"step": %s, "hooks": "all"}]\n' "$((step - 1))" >"$D/late.json"
ctl plan submit "$D/late.json" || echo "(exit $? as documented: 1 = refused by the daemon)"

say "what the graphs hold, and the same as JSON for programs"
ctl graphs
echo '$ togglectl --json hooks | python3 -m json.tool'
"$B/togglectl" --socket "$SOCK" --json hooks | python3 -m json.tool | head -n 20

say "switch everything off"
ctl set none --wait
agent_says

say "stop the agent and the daemon"
kill "$AGENT_PID"
if wait "$AGENT_PID"; then rc=0; else rc=$?; fi
AGENT_PID=""
agent_says 0
kill "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
DAEMON_PID=""
if [ "$rc" -eq 0 ]; then
	echo "demo: OK: every step's producers matched what the gate reported"
else
	echo "demo: FAILED: the agent exited with $rc"
	exit 1
fi
