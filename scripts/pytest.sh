#!/bin/sh
# pytest.sh - the Python package's tests (python/tests) for make check: the
# simulator backend, the fake torch, a real toggled on a temporary socket.
# libtoggle is the ASan+UBSan build ($B/libtoggle-san.so), loaded into Python
# with the sanitizer runtimes preloaded (leak checks off: CPython itself keeps
# memory to exit).  Uses $PYTHON, else the first python3 that has pytest
# (scripts/deps.sh installs python3-pytest for /usr/bin/python3).
# Usage: scripts/pytest.sh [pytest args, paths relative to python/]   (default: tests)
set -eu
cd "$(dirname "$0")/.."
B=${B:-build}
CC=${CC:-cc}

py=""
for p in ${PYTHON:-} python3 /usr/bin/python3; do
	if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import pytest' 2>/dev/null; then
		py=$p
		break
	fi
done
if [ -z "$py" ]; then
	echo "pytest.sh: no python3 with pytest (scripts/deps.sh installs python3-pytest)" >&2
	exit 1
fi

lib="$B/libtoggle-san.so"
preload=""
for rt in libasan.so libubsan.so; do
	f=$("$CC" -print-file-name=$rt 2>/dev/null || true)
	case "$f" in /*) [ -e "$f" ] && preload="$preload $f" ;; esac
done
if [ -z "$preload" ]; then
	# clang links its sanitizer runtimes statically: nothing to preload, so test the
	# plain library rather than fail to load the instrumented one
	echo "pytest.sh: $CC has no shared sanitizer runtime; testing $B/libtoggle.so" >&2
	lib="$B/libtoggle.so"
fi
export GRAPHTOGGLE_LIB="$PWD/$lib" B="$B"
[ $# -gt 0 ] || set -- tests
echo "== python/$* ($py, $lib)"
cd python
LD_PRELOAD="${preload# }" ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	exec "$py" -m pytest -q -p no:cacheprovider "$@"
