#!/bin/sh
# layer-check.sh [OBJDIR [DOC [SRCDIR]]] - the calls between daemon/'s files run one
# way (issue 29): a file calls only files of its own level or below, and no
# files call each other in a loop.
#
# The levels are the table in DOC (default docs/architecture.md) between the
# lines "<!-- daemon-layers begin -->" and "<!-- daemon-layers end -->":
# rows "| LEVEL | name | file.c, file.c | ... |".  The calls are read from
# the objects in OBJDIR (default build/daemon, as `make` leaves them) that
# have a source in SRCDIR (default daemon: an object left from a removed
# file is not counted): a file calls another when its object has an
# undefined symbol the other's object defines (nm).  What goes through a function pointer registered from above
# (report.h) is not a call of the lower file's, which is the point.
#
# Prints the file-to-file call graph, then fails (exit 1) on
#   - a daemon/*.c file the table does not place (a new file needs a level),
#   - a call from a file to one of a higher level (the symbols named),
#   - a cycle (each strongly connected set of files, with the mutual pairs).
#   scripts/layer-check.sh                     this checkout's build
#   scripts/layer-check.sh /tmp/old/build/daemon docs/architecture.md
set -eu
objdir=${1:-build/daemon}
doc=${2:-docs/architecture.md}
srcdir=${3:-daemon}
[ -d "$objdir" ] || { echo "layer-check: no $objdir (build first: make build/toggled)" >&2; exit 2; }
[ -f "$doc" ] || { echo "layer-check: no $doc" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# level per file, from the doc's table
sed -n '/<!-- daemon-layers begin -->/,/<!-- daemon-layers end -->/p' "$doc" |
	awk -F'|' 'NF >= 4 && $2 ~ /^ *[0-9]+ *$/ {
		lvl = $2 + 0; n = split($4, f, /[ ,`]+/)
		for (i = 1; i <= n; i++) if (f[i] ~ /^[a-z_0-9]+\.c$/) { sub(/\.c$/, "", f[i]); print f[i], lvl }
	}' | sort -u >"$tmp/levels"
[ -s "$tmp/levels" ] || { echo "layer-check: no level table in $doc" >&2; exit 2; }

objs=""
for o in "$objdir"/*.o; do
	[ -f "$o" ] && [ -f "$srcdir/$(basename "$o" .o).c" ] && objs="$objs $o"
done
[ -n "$objs" ] || { echo "layer-check: no objects of $srcdir/*.c in $objdir" >&2; exit 2; }
for o in $objs; do
	f=$(basename "$o" .o)
	nm -g --defined-only "$o" | awk -v f="$f" 'NF >= 3 { print $3, f }'
done | sort -k1,1 >"$tmp/defs"
for o in $objs; do
	f=$(basename "$o" .o)
	nm -u "$o" | awk -v f="$f" '{ print $2, f }'
done | sort -k1,1 >"$tmp/uses"
# caller callee symbol
join "$tmp/uses" "$tmp/defs" | awk '$2 != $3 { print $2, $3, $1 }' | sort >"$tmp/calls"

awk -v levels="$tmp/levels" -v srcdir="$srcdir" -v files="$(for o in $objs; do basename "$o" .o; done | tr '\n' ' ')" '
BEGIN {
	while ((getline line < levels) > 0) { split(line, x, " "); lvl[x[1]] = x[2] }
	nf = split(files, fl, " ")
	for (i = 1; i <= nf; i++) {
		node[fl[i]] = 1
		if (!(fl[i] in lvl)) { printf "FAIL: %s/%s.c has no level in the table\n", srcdir, fl[i]; bad = 1 }
	}
}
{
	k = $1 SUBSEP $2
	if (!(k in edge)) { edge[k] = 1; order[++ne] = k }
	syms[k] = syms[k] " " $3
	e[$1, $2] = 1
}
END {
	print "== " srcdir "/ file-to-file calls (caller [level] -> callee [level]: symbols)"
	for (i = 1; i <= ne; i++) {
		split(order[i], p, SUBSEP)
		printf "  %s [%s] -> %s [%s]:%s\n", p[1], lvl[p[1]], p[2], lvl[p[2]], syms[order[i]]
	}
	for (i = 1; i <= ne; i++) {
		split(order[i], p, SUBSEP)
		if ((p[1] in lvl) && (p[2] in lvl) && lvl[p[2]] + 0 > lvl[p[1]] + 0) {
			printf "FAIL: upward call: %s [%s] calls %s [%s]:%s\n", p[1], lvl[p[1]], p[2],
				lvl[p[2]], syms[order[i]]
			bad = 1; up++
		}
	}
	# Reachability (transitive closure): a and b are in one cycle when each reaches the other.
	for (a in node) for (b in node) r[a, b] = ((a, b) in e)
	for (k in node) for (a in node) if (r[a, k]) for (b in node) if (r[k, b]) r[a, b] = 1
	for (a in node) {
		if (done[a] || !r[a, a]) continue
		scc = ""; n = 0
		for (b in node) if (r[a, b] && r[b, a]) { done[b] = 1; m[++n] = b }
		# sorted, for a stable report
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (m[j] < m[i]) { t = m[i]; m[i] = m[j]; m[j] = t }
		for (i = 1; i <= n; i++) scc = scc " " m[i]
		pairs = ""
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
			if ((m[i], m[j]) in e && (m[j], m[i]) in e) pairs = pairs " " m[i] "<->" m[j]
		printf "FAIL: cycle of %d files:%s%s\n", n, scc, pairs == "" ? "" : " (calling each other:" pairs ")"
		bad = 1; cyc++
	}
	printf "layer-check: %d files, %d file-to-file calls, %d upward, %d cycles\n", nf, ne, up + 0, cyc + 0
	exit bad
}' "$tmp/calls"
