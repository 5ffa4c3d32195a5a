#!/bin/sh
# api.sh [B] - no file of libtoggle/src calls an entry point of the agent API
# (a toggle_* function declared in libtoggle/include/toggle.h) that another
# file defines: inside the library, files call the internal tg_* cores
# (issue 29; docs/architecture.md, "Inside libtoggle").  The leaf helper
# libraries' public functions (toggle_set_*, toggle_strerror, toggle_shm_*,
# toggle_sim_*) are declared in their own headers and are not checked.
# From the objects make built ($B/libtoggle/src/*.o, nm).
set -eu
B=${1:-${B:-build}}
api=$(grep -E '^[A-Za-z]' libtoggle/include/toggle.h | grep -o '\btoggle_[a-z0-9_]*(' | tr -d '(' | sort -u)
[ -n "$api" ] || { echo "FAIL: api.sh: no toggle_* declaration found in toggle.h" >&2; exit 1; }
bad=0
for o in "$B"/libtoggle/src/*.o; do
	for s in $(nm -P "$o" | awk '$2 == "U" && $1 ~ /^toggle_/ { print $1 }'); do
		if echo "$api" | grep -qx "$s"; then
			echo "FAIL: $(basename "$o" .o).c calls the public entry point $s: call its tg_* core" >&2
			bad=1
		fi
	done
done
[ "$bad" -eq 0 ] || exit 1
echo "api.sh: no public entry point of toggle.h is called between libtoggle's files"
