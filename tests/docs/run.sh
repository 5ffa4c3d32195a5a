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
# The page's block as written: nothing is added to it.
awk -f tests/docs/example.awk docs/libtoggle.md >"$T/ex.c"
[ -s "$T/ex.c" ] || { echo "docs: the simulator example was not found in docs/libtoggle.md"; exit 1; }
"$CC" -std=c17 -Wall -Wextra -Werror -Ilibtoggle/include -isystem "$CUDA_HOME/include" \
	"$T/ex.c" "$B/libtoggle.a" -ldl -lpthread -o "$T/ex" ||
	{ echo "docs: the simulator example of docs/libtoggle.md does not compile as written"; exit 1; }
"$T/ex" >"$T/out"
printf 'producer 0:1 ran\nproducer 0:2 ran\n' | diff -u - "$T/out" ||
	{ echo "docs: the example printed something else than the page says"; exit 1; }
echo "run.sh: docs/libtoggle.md simulator example compiles and prints what it says"
