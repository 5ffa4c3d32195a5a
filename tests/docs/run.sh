#!/bin/sh
# run.sh - the complete simulator example of docs/libtoggle.md, compiled and
# run as it stands in the page: a page that stops compiling or printing what
# it says fails make check.
set -eu
B=${B:-build}
CC=${CC:-cc}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
T=$(mktemp -d /tmp/tgdocs.XXXXXX)
trap 'rm -rf "$T"' EXIT
# The code block that starts with the two includes, up to its closing fence.
awk '/^#include "toggle.h"$/ { getline nxt; if (nxt ~ /toggle_sim.h/) { on = 1; print; print nxt; next } }
     on && /^```/ { exit } on { print }' docs/libtoggle.md >"$T/example.c"
[ -s "$T/example.c" ] || { echo "docs: the simulator example was not found in docs/libtoggle.md"; exit 1; }
printf '#include <stdio.h>\n' | cat - "$T/example.c" >"$T/ex.c"
"$CC" -std=c17 -Wall -Wextra -Werror -Ilibtoggle/include -isystem "$CUDA_HOME/include" \
	"$T/ex.c" "$B/libtoggle.a" -ldl -lpthread -o "$T/ex"
"$T/ex" >"$T/out"
printf 'producer 0:1 ran\nproducer 0:2 ran\n' | diff -u - "$T/out" ||
	{ echo "docs: the example printed something else than the page says"; exit 1; }
echo "run.sh: docs/libtoggle.md simulator example compiles and prints what it says"
