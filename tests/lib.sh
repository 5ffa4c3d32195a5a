# shellcheck shell=bash
# tests/lib.sh - what the end-to-end shell tests share (tests/cli/run.sh,
# tests/cluster/run.sh): where the source tree and the build are, the
# failure count, the programs a test needs, a private temporary directory
# that is kept when something failed, and bounded waits.  bash; set TL_NAME
# (how messages name the test) and source it:
#
#   TL_NAME=cluster/run.sh
#   . "$(cd "$(dirname "$0")/.." && pwd)/lib.sh"
#
# Sets TOP (the source tree), B (the build directory, made absolute; $B or
# build), FAILS and CHECKS (0); defines fail, skip (tests/skip.sh),
# tl_need, tl_tmpdir, tl_rm_tmpdir and wait_for.  A test's own cleanup trap
# stops what it started, then calls tl_rm_tmpdir.

TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
B=${B:-build}
case $B in /*) ;; *) B=$TOP/$B ;; esac
FAILS=0
CHECKS=0

fail() {
	FAILS=$((FAILS + 1))
	echo "FAIL: $*" >&2
}
# shellcheck source=tests/skip.sh
. "$TOP/tests/skip.sh"

# tl_need FILE...: each must be an executable that was built; else exit 1.
tl_need() {
	local f
	for f; do
		if [ ! -x "$f" ]; then
			echo "$TL_NAME: $f is missing; build it first" >&2
			exit 1
		fi
	done
}

# tl_tmpdir PREFIX: T, a new private directory /tmp/PREFIX.XXXXXX (short:
# socket paths in it must fit in sun_path); exit 1 if it cannot be made.
tl_tmpdir() {
	T=$(mktemp -d "/tmp/$1.XXXXXX") || exit 1
}

# tl_rm_tmpdir: remove T, unless KEEP=1 or a check failed (then say where it is).
tl_rm_tmpdir() {
	if [ "${KEEP:-0}" = 1 ] || [ "$FAILS" -gt 0 ]; then
		echo "$TL_NAME: logs kept in $T" >&2
	else
		rm -rf "$T"
	fi
}

# wait_for SECONDS WHAT CMD...: run CMD (its output discarded) every 0.05 s
# until it succeeds; a failure naming WHAT once SECONDS have passed and it
# was tried at least 10 times a second's worth (a slow CMD still gets its
# tries).  Returns 0 or 1.  With TL_WAIT_IS_CHECK=1 each wait counts in CHECKS.
wait_for() {
	local secs=$1 what=$2 tries=0
	shift 2
	[ "${TL_WAIT_IS_CHECK:-0}" = 1 ] && CHECKS=$((CHECKS + 1))
	local end=$(($(date +%s%N) / 1000000 + secs * 1000))
	while ! "$@" >/dev/null 2>&1; do
		tries=$((tries + 1))
		if [ "$tries" -ge $((secs * 10)) ] && [ $(($(date +%s%N) / 1000000)) -ge "$end" ]; then
			fail "$what (not within $secs s)"
			return 1
		fi
		sleep 0.05
	done
	return 0
}
