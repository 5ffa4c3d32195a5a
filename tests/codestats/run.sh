#!/bin/sh
# run.sh - scripts/code-stats.sh --fail-on-cycles on small trees whose
# answer is known: two files that call each other (a cycle: exit 1, the
# cycle and its calls named), a chain (no cycle: exit 0, its layers), a
# cycle through three files, and a directory that does not exist (exit 2).
set -eu
CC=${CC:-cc}
root=$(pwd)
t=$(mktemp -d "${TMPDIR:-/tmp}/codestats.XXXXXX")
trap 'rm -rf "$t"' EXIT
fail() { echo "FAIL: codestats: $*" >&2; exit 1; }

# tree NAME FILE:BODY...: NAME/FILE.c with BODY, compiled into build/NAME/.
tree() {
	name=$1; shift
	mkdir -p "$t/$name" "$t/build/$name"
	for spec in "$@"; do
		f=${spec%%:*}
		printf '%s\n' "${spec#*:}" >"$t/$name/$f.c"
		"$CC" -std=c17 -O0 -c "$t/$name/$f.c" -o "$t/build/$name/$f.o"
	done
}
# Objects are built above: the script must not run make (MAKELEVEL says so).
stats() {
	args=""
	for d in "$@"; do args="$args --fail-on-cycles $d"; done
	# shellcheck disable=SC2086 # one word per argument
	(cd "$t" && MAKELEVEL=1 B=build "$root/scripts/code-stats.sh" $args)
}

tree loop 'a:void b(void); void a(void) { b(); }' 'b:void a(void); void b(void) { a(); }'
rc=0; out=$(stats loop 2>&1) || rc=$?
[ "$rc" -eq 1 ] || fail "a -> b -> a: exit $rc, expected 1: $out"
echo "$out" | grep -q "cycle of 2 files: a b" || fail "a -> b -> a not named: $out"
echo "$out" | grep -q "a -> b: b" || fail "the call a -> b not named: $out"

tree chain 'a:void b(void); void a(void) { b(); }' 'b:void c(void); void b(void) { c(); }' \
	'c:int c_data; void c(void) { c_data++; }'
rc=0; out=$(stats chain 2>&1) || rc=$?
[ "$rc" -eq 0 ] || fail "a -> b -> c: exit $rc, expected 0: $out"
echo "$out" | grep -q "no cycle" || fail "a -> b -> c: $out"
echo "$out" | grep -q "layer 2: a" || fail "a -> b -> c: a not on layer 2: $out"

# Through data too, and three files: a -> b -> c -> a.
tree ring 'a:void b(void); int a_data; void a(void) { b(); }' 'b:void c(void); void b(void) { c(); }' \
	'c:extern int a_data; void c(void) { a_data++; }'
rc=0; out=$(stats chain ring 2>&1) || rc=$?
[ "$rc" -eq 1 ] || fail "a -> b -> c -> a: exit $rc, expected 1: $out"
echo "$out" | grep -q "cycle of 3 files: a b c" || fail "the ring not named: $out"
echo "$out" | grep -q "c -> a: a_data" || fail "the use of a_data not named: $out"

rc=0; out=$(stats nosuchdir 2>&1) || rc=$?
[ "$rc" -ne 0 ] || fail "a missing directory passed: $out"
echo "codestats: 4 cases passed"
