#!/bin/sh
# run.sh - scripts/layer-check.sh itself: on three small files whose calls
# are known (low.c, mid.c, high.c, compiled here), it passes when the calls
# run down, and fails on a call upward, on a cycle between files of one
# level, and on a file its table does not place.
set -eu
CC=${CC:-cc}
T=$(mktemp -d /tmp/tglayers.XXXXXX)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/src" "$T/obj"
table() { # level of low, mid, high
	{
		echo "<!-- daemon-layers begin -->"
		echo "| level | layer | files | may call |"
		echo "|---|---|---|---|"
		echo "| $3 | top | \`high.c\` | below |"
		echo "| $2 | middle | \`mid.c\` | below |"
		echo "| $1 | bottom | \`low.c\` | nothing |"
		echo "<!-- daemon-layers end -->"
	} >"$T/doc.md"
}
build() { # the sources as given in $T/src
	rm -f "$T/obj"/*.o
	for f in "$T/src"/*.c; do
		"$CC" -c -o "$T/obj/$(basename "$f" .c).o" "$f"
	done
}
expect() { # rc pattern description
	rc=0
	scripts/layer-check.sh "$T/obj" "$T/doc.md" "$T/src" >"$T/out" 2>&1 || rc=$?
	if [ "$rc" -ne "$1" ] || ! grep -q -- "$2" "$T/out"; then
		echo "layers: $3: expected exit $1 and '$2', got exit $rc:"
		cat "$T/out"
		exit 1
	fi
}
printf 'int low(void);\nint low(void) { return 1; }\n' >"$T/src/low.c"
printf 'int low(void);\nint mid(void);\nint mid(void) { return low(); }\n' >"$T/src/mid.c"
printf 'int mid(void);\nint high(void);\nint high(void) { return mid(); }\n' >"$T/src/high.c"
build
table 0 10 20
expect 0 "2 file-to-file calls, 0 upward, 0 cycles" "calls that run down"
table 20 10 0
expect 1 "FAIL: upward call: mid \[10\] calls low \[20\]: low" "a call upward"
# mid and low call each other, both at one level: no call upward, but a cycle.
printf 'int mid(void);\nint low(void);\nint low(void) { return mid(); }\n' >"$T/src/low.c"
build
table 10 10 20
expect 1 "FAIL: cycle of 2 files: low mid (calling each other: low<->mid)" "a cycle"
printf 'int other(void);\nint other(void) { return 2; }\n' >"$T/src/other.c"
build
expect 1 "FAIL: $T/src/other.c has no level in the table" "a file without a level"
echo "run.sh: layer-check.sh passes calls that run down, fails a call upward, a cycle and an unplaced file"
