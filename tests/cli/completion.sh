#!/bin/bash
# completion.sh - client/togglectl.bash, the bash completion make install
# puts in share/bash-completion/completions: commands, options, plan's
# subcommands, selectors and hook types read from a real toggled with a
# simulator agent, and nothing (at once) where no daemon answers.  Then, on
# the same daemon, togglectl's name:NAME where two agents share a name.
set -u
TL_NAME=cli/completion.sh
# shellcheck source=tests/lib.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib.sh"
CTL=$B/togglectl
tl_need "$CTL" "$B/toggled" "$B/examples/demo_agent"
tl_tmpdir tgcomp
PIDS=
cleanup() { for p in $PIDS; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; tl_rm_tmpdir; }
trap cleanup EXIT
# shellcheck source=client/togglectl.bash
. "$TOP/client/togglectl.bash"

# comp WORDS...: COMPREPLY for the command line WORDS, the last one being
# completed, sorted on one line, in $GOT
comp() {
	COMP_WORDS=("$CTL" "$@")
	COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
	COMPREPLY=()
	_togglectl
	GOT=$(printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' ')
	GOT=${GOT% }
}
expect() { # WHAT WANT WORDS...
	local what=$1 want=$2; shift 2
	comp "$@"
	CHECKS=$((CHECKS + 1))
	[ "$GOT" = "$want" ] || fail "$what: got '$GOT', expected '$want'"
}

expect "a command" "set status" s
expect "plan's subcommands" "show submit" plan s
expect "an option" "--target --timeout" --t
expect "--wait's form" "--wait=10s --wait=1m" --wait=1
start=$(date +%s%N)
expect "no daemon: specs" "all none" -s "$T/none.sock" enable ""
expect "no daemon: selectors" "agent: all group: name: pid:" -s "$T/none.sock" -t ""
[ $(( ($(date +%s%N) - start) / 1000000 )) -lt 3000 ] || fail "completion without a daemon took over 3 s"

"$B/toggled" --socket "$T/sock" --state-dir "$T/state" >"$T/toggled.log" 2>&1 &
PIDS="$PIDS $!"
"$B/examples/demo_agent" --backend sim --socket "$T/sock" --period-ms 20 --name comp-engine \
	--group decode >"$T/agent.log" 2>&1 &
PIDS="$PIDS $!"
listed() { "$CTL" -s "$T/sock" --json agents 2>/dev/null | grep -q comp-engine; }
wait_for 10 "the agent is listed" listed || exit 1
id=$("$CTL" -s "$T/sock" --json agents | python3 -c 'import json,sys; print(json.load(sys.stdin)["agents"][0]["agent_id"])')
expect "hook types from the daemon" "attn_out" -s "$T/sock" set "at"
expect "specs from the daemon" "all attn_out mlp_out none resid_post" --socket="$T/sock" enable ""
expect "selectors from the daemon" "agent: agent:$id" -s "$T/sock" --target "ag"
expect "a group from the daemon" "group: group:decode" -s "$T/sock" hooks "gr"
expect "a name from the daemon" "name: name:comp-engine" -s "$T/sock" graphs "na"

# name:NAME where two agents share a name (run.sh has one agent): refused,
# naming both ids, nothing sent to either (the second agent lives here only)
"$B/examples/demo_agent" --backend sim --socket "$T/sock" --period-ms 20 --name comp-engine \
	>"$T/agent2.log" 2>&1 &
PIDS="$PIDS $!"
two() { [ "$("$CTL" -s "$T/sock" --json agents | grep -c '"name": "comp-engine"')" -eq 2 ]; }
wait_for 10 "a second comp-engine" two || exit 1
ids=$("$CTL" -s "$T/sock" --json agents | python3 -c 'import json,sys; print(", ".join(str(a["agent_id"]) for a in json.load(sys.stdin)["agents"]))')
"$CTL" -s "$T/sock" -t name:comp-engine set none >"$T/out" 2>&1
rc=$?
CHECKS=$((CHECKS + 1))
grep -qF "2 agents are called 'comp-engine' (ids $ids): choose one with agent:ID" "$T/out" && [ "$rc" -eq 2 ] ||
	fail "name: of two agents: exit $rc, $(cat "$T/out")"

[ "$FAILS" -eq 0 ] || { echo "$TL_NAME: $FAILS failure(s) in $CHECKS checks"; exit 1; }
echo "$TL_NAME: $CHECKS completions as expected"
