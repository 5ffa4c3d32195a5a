# skip.sh - sourced by the shell tests: the shell side of tests/testutil.h's
# tu_skip.  skip "what: why" [root]: prints SKIP and appends the line to
# $TG_SKIP_LOG for make check's count; a root skip fails (returns 1 after
# calling fail) when TG_REQUIRE_ROOT_TESTS=1.
skip() {
	if [ "${2:-}" = root ] && [ "${TG_REQUIRE_ROOT_TESTS:-0}" = 1 ]; then
		fail "not skipped (TG_REQUIRE_ROOT_TESTS=1): $1"
		return 1
	fi
	echo "SKIP: $1" >&2
	if [ -n "${TG_SKIP_LOG:-}" ]; then echo "$1" >>"$TG_SKIP_LOG"; fi
}
