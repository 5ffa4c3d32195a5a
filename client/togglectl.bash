# bash completion for togglectl (make install puts it in
# PREFIX/share/bash-completion/completions/togglectl; or source it).
# Commands, options, plan's subcommands, selector forms, and what the
# daemon knows: agent ids, groups and pids for selectors, hook types (and
# "none", "all") for specs, read with `togglectl --json` (timeout 1s: a
# daemon that is not there completes nothing more, never hangs the shell).

_togglectl_json() { # ARGS...: togglectl --json ARGS with this line's --socket
	local sock=() i
	for ((i = 1; i < ${#COMP_WORDS[@]} - 1; i++)); do
		case ${COMP_WORDS[i]} in
		-s | --socket) sock=(--socket "${COMP_WORDS[i + 1]}") ;;
		--socket=*) sock=("${COMP_WORDS[i]}") ;;
		esac
	done
	"${COMP_WORDS[0]}" "${sock[@]}" --timeout 1s --json "$@" 2>/dev/null
}

# _togglectl_known WHAT: "selectors" (agent:ID, pid:PID, group:NAME of the
# agents there) or "types" (their hook types), from togglectl --json agents.
_togglectl_known() {
	_togglectl_json agents | python3 -c '
import json, sys
try:
    ags = json.load(sys.stdin)["agents"]
except Exception:
    sys.exit(0)
out = []
for a in ags:
    if sys.argv[1] == "types":
        out += a.get("hook_types", [])
    else:
        out += ["agent:%d" % a["agent_id"], "name:" + a["name"], "pid:%d" % a["pid"]]
        out += ["group:" + a["group"]] if a.get("group") else []
print(" ".join(dict.fromkeys(out)))' "$1" 2>/dev/null
}

_togglectl_selectors() { echo "all agent: name: pid: group: $(_togglectl_known selectors)"; }
_togglectl_specs() { echo "none all $(_togglectl_known types)"; }

_togglectl() {
	local cur prev words cword
	cur=${COMP_WORDS[COMP_CWORD]}
	prev=${COMP_WORDS[COMP_CWORD - 1]}
	local cmds="status agents graphs hooks enable disable set plan watch record help"
	local opts="--socket --target --json --wait --wait= --aligned --aligned= --timeout --etcd --cluster --output --steps --until-interrupt --agents --help --version"
	case $prev in
	-s | --socket) COMPREPLY=($(compgen -f -- "$cur")); return ;;
	-t | --target | --agents) COMPREPLY=($(compgen -W "$(_togglectl_selectors)" -- "$cur")); return ;;
	-o | --output) COMPREPLY=($(compgen -d -- "$cur")); return ;;
	--timeout | --etcd | --cluster | --steps) COMPREPLY=(); return ;;
	esac
	if [[ $cur == --wait=* ]]; then
		COMPREPLY=($(compgen -W "--wait=500ms --wait=2s --wait=10s --wait=1m" -- "$cur"))
		return
	fi
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$opts" -- "$cur"))
		return
	fi
	# the command: the first word that is not an option or an option's value
	local i cmd="" sub=""
	for ((i = 1; i < COMP_CWORD; i++)); do
		case ${COMP_WORDS[i]} in
		-s | --socket | -t | --target | --timeout | --etcd | --cluster | -o | --output | --steps | --agents) ((i++)) ;;
		-*) ;;
		*) if [ -z "$cmd" ]; then cmd=${COMP_WORDS[i]}; elif [ -z "$sub" ]; then sub=${COMP_WORDS[i]}; fi ;;
		esac
	done
	case $cmd in
	"") COMPREPLY=($(compgen -W "$cmds" -- "$cur")) ;;
	plan)
		if [ -z "$sub" ]; then COMPREPLY=($(compgen -W "submit show clear" -- "$cur"))
		elif [ "$sub" = submit ]; then COMPREPLY=($(compgen -f -- "$cur") -); fi ;;
	graphs | hooks) [ -z "$sub" ] && COMPREPLY=($(compgen -W "$(_togglectl_selectors)" -- "$cur")) ;;
	enable | disable | set | record) COMPREPLY=($(compgen -W "$(_togglectl_specs)" -- "$cur")) ;;
	*) COMPREPLY=() ;;
	esac
}
complete -F _togglectl togglectl
