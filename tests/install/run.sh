#!/bin/sh
# run.sh - the installed tree alone is enough: make install into a staging
# directory (DESTDIR) with a prefix no compiler searches, then an external
# program (docs/libtoggle.md's simulator example, taken from the installed
# copy of the page) is built with nothing but `pkg-config --cflags --libs
# libtoggle` and run; and every file the installed man pages name exists.
set -eu
B=${B:-build}
MAKE=${MAKE:-make}
CC=${CC:-cc}
PREFIX=/opt/graphtoggle-test
T=$(mktemp -d /tmp/tginst.XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

"$MAKE" --no-print-directory install B="$B" DESTDIR="$T/stage" PREFIX="$PREFIX" >"$T/install.log" 2>&1 ||
	{ cat "$T/install.log"; echo "FAIL: make install"; exit 1; }
ROOT=$T/stage$PREFIX

# A staged tree: move the prefix, leave the CUDA headers where they are.
pc() { PKG_CONFIG_PATH=$ROOT/lib/pkgconfig PKG_CONFIG_LIBDIR=$ROOT/lib/pkgconfig \
	pkg-config --define-variable=prefix="$ROOT" "$@" libtoggle; }
cflags=$(pc --cflags) || { echo "FAIL: pkg-config --cflags libtoggle"; exit 1; }
libs=$(pc --libs) || { echo "FAIL: pkg-config --libs libtoggle"; exit 1; }
echo "pkg-config: $cflags $libs"

# Every header toggle.h needs must be in a directory the flags name: a
# compiler that happens to find cuda.h elsewhere (/usr/local/include) must
# not hide a .pc file that forgot it.
dirs=$(printf '%s\n' $cflags | awk '/^-I./ { print substr($0, 3); next } prev == "-isystem" { print } { prev = $0 }')
for h in toggle.h toggle_sim.h cuda.h; do
	found=""
	for d in $dirs; do [ -e "$d/$h" ] && found=$d; done
	if [ -n "$found" ]; then ok "$h is in $found"; else fail "no directory of '$cflags' has $h"; fi
done

# The program, from the installed page, built outside the source tree.
awk -f tests/docs/example.awk "$ROOT/share/doc/graphtoggle/libtoggle.md" >"$T/ex.c" 2>/dev/null || true
[ -s "$T/ex.c" ] || fail "installed libtoggle.md has no simulator example"
# shellcheck disable=SC2086
if (cd "$T" && env -u CPATH -u C_INCLUDE_PATH "$CC" -std=c17 -Wall -Wextra -Werror $cflags ex.c $libs -o ex); then
	ok "external program built from pkg-config's flags alone"
	if LD_LIBRARY_PATH=$ROOT/lib "$T/ex" >"$T/out" &&
		printf 'producer 0:1 ran\nproducer 0:2 ran\n' | cmp -s - "$T/out"; then
		ok "it runs against the installed libtoggle.so"
	else
		fail "the external program did not print what the page says"; cat "$T/out"
	fi
else
	fail "external program does not build from '$cflags $libs'"
fi

# togglectl's bash completion, where bash-completion looks for it.
comp=$ROOT/share/bash-completion/completions/togglectl
if [ -s "$comp" ] && bash -n "$comp"; then ok "bash completion installed"; else fail "no bash completion at $comp"; fi

# What the installed man pages point at is installed.
for m in "$ROOT"/share/man/man*/*; do
	for p in $(grep -o "$PREFIX/[A-Za-z0-9_./-]*[A-Za-z0-9_]" "$m" | sort -u); do
		[ -e "$T/stage$p" ] || fail "${m##*/} names $p, which make install did not install"
	done
	if grep -n -e 'docs/' -e 'proto/toggle' -e 'examples/' "$m" | grep -v "$PREFIX/" >"$T/rel"; then
		fail "${m##*/} names source-tree paths: $(cat "$T/rel")"
	fi
done
[ "$fails" -eq 0 ] && ok "man pages name installed files only"

[ "$fails" -eq 0 ] || { echo "run.sh: $fails failure(s)"; exit 1; }
echo "run.sh: the installed tree builds and runs an external program; man page paths are installed"
