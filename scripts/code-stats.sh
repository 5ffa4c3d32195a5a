#!/bin/sh
# code-stats.sh [--fail-on-cycles DIR]... [CHECKOUT] - the shape figures
# issues 16 and 29 ask for, of the C tree in CHECKOUT (default .): the
# longest functions, the include graph between the modules, how many
# sources of the daemon and the CLI include cuda.h (directly or through a
# header), and the call cycles between the files of daemon/ and
# libtoggle/src/.
#   scripts/code-stats.sh            this checkout
#   git worktree add /tmp/old REV && scripts/code-stats.sh /tmp/old
#   scripts/code-stats.sh --fail-on-cycles libtoggle/src
#                                    only the cycles of DIR; exit 1 if any
#                                    (make check; repeatable)
# The first three are pure text.  The cycles come from object
# cross-references: which file's object uses a symbol that another file of
# the same directory defines (nm; calls and data alike).  The objects are
# those make builds ($B/DIR/*.o, B=build by default): the script runs make
# for them first, unless make runs it (then its recipe's prerequisites
# are).  A cycle is a set of files each of which reaches every other
# through such uses: a strongly connected component of two files or more.
set -eu
fail_dirs=""
while [ $# -gt 0 ]; do
	case $1 in
	--fail-on-cycles)
		[ $# -ge 2 ] || { echo "code-stats.sh: --fail-on-cycles needs a directory" >&2; exit 2; }
		fail_dirs="$fail_dirs ${2%/}"; shift 2 ;;
	-h|--help) sed -n '2,19p' "$0"; exit 0 ;;
	-*) echo "code-stats.sh: unknown option $1" >&2; exit 2 ;;
	*) break ;;
	esac
done
[ $# -le 1 ] || { echo "code-stats.sh: one checkout at most" >&2; exit 2; }
dir=${1:-.}
cd "$dir"
B=${B:-build}

# cycles DIR...: print each DIR's files, calls between them and cycles;
# returns 1 if any DIR has a cycle (2 if its objects cannot be had).
cycles() {
	rc=0
	for d in "$@"; do
		if [ ! -d "$d" ]; then
			echo "  $d: no such directory"; rc=2; continue
		fi
		objs=$(for c in "$d"/*.c; do [ -e "$c" ] && echo "$B/${c%.c}.o"; done)
		if [ -z "$objs" ]; then
			echo "  $d: no C sources"; continue
		fi
		if [ -z "${MAKELEVEL:-}" ]; then
			log=${TMPDIR:-/tmp}/code-stats-make.$$
			# shellcheck disable=SC2086 # one word per object
			if ! make -s --no-print-directory B="$B" $objs >"$log" 2>&1; then
				echo "  $d: make could not build its objects:"; tail -n 5 "$log" | sed 's/^/    /'
				rm -f "$log"; rc=2; continue
			fi
			rm -f "$log"
		fi
		missing=""
		for o in $objs; do [ -f "$o" ] || missing="$missing $o"; done
		if [ -n "$missing" ]; then
			echo "  $d: objects missing:$missing"; rc=2; continue
		fi
		# One line per symbol: "D file sym" (defined, global) or "U file sym".
		for o in $objs; do
			f=$(basename "$o" .o)
			nm -P "$o" | awk -v f="$f" '$2 == "U" { print "U", f, $1; next }
				$2 ~ /^[A-TV-Z]$/ { print "D", f, $1 }'
		done | awk -v dir="$d" '
		$1 == "D" { def[$3] = $2; files[$2] = 1; next }
		{ files[$2] = 1; use[++nu] = $2 " " $3 }
		END {
			for (i = 1; i <= nu; i++) {
				split(use[i], p, " ")
				if (!(p[2] in def) || def[p[2]] == p[1]) continue
				e = p[1] SUBSEP def[p[2]]
				if (!(e in syms)) { ne++; out[p[1]] = out[p[1]] " " def[p[2]] }
				syms[e] = syms[e] " " p[2]
			}
			nf = 0; for (f in files) nf++
			# Tarjan: strongly connected components of the file graph.
			idx = 0; top = 0; ncyc = 0
			for (f in files) if (!(f in num)) visit(f)
			printf "  %s: %d files, %d uses between files, ", dir, nf, ne
			if (!ncyc) {
				print "no cycle"
				for (f in files) lvl(f)
				for (l = 0; l <= maxl; l++) {
					line = ""
					for (f in files) if (level[f] == l) line = line " " f
					printf "    layer %d:%s\n", l, sorted(line)
				}
				exit 0
			}
			printf "%d cycle%s\n", ncyc, (ncyc > 1 ? "s" : "")
			for (c = 1; c <= ncyc; c++) {
				n = split(cyc[c], m, " ")
				printf "    cycle of %d files:%s\n", n, sorted(cyc[c])
				for (i = 1; i <= n; i++) for (j = 1; j <= n; j++) {
					e = m[i] SUBSEP m[j]
					if (i == j || !(e in syms)) continue
					k = split(syms[e], s, " "); t = ""
					for (x = 1; x <= k && x <= 4; x++) t = t " " s[x]
					if (k > 4) t = t " +" (k - 4)
					printf "      %s -> %s:%s\n", m[i], m[j], t
				}
			}
			exit 1
		}
		function visit(v,    w, n, i, k, c) {
			num[v] = low[v] = ++idx; stack[++top] = v; on[v] = 1
			n = split(out[v], k, " ")
			for (i = 1; i <= n; i++) {
				w = k[i]
				if (!(w in num)) { visit(w); if (low[w] < low[v]) low[v] = low[w] }
				else if (on[w] && num[w] < low[v]) low[v] = num[w]
			}
			if (low[v] != num[v]) return
			c = ""
			do { w = stack[top--]; on[w] = 0; c = c " " w } while (w != v)
			if (split(c, k, " ") > 1) cyc[++ncyc] = c
		}
		# A layer: 0 for a file that uses no other, else one above its highest callee.
		function lvl(v,    n, i, k, l) {
			if (v in level) return level[v]
			l = 0; n = split(out[v], k, " ")
			for (i = 1; i <= n; i++) if (lvl(k[i]) + 1 > l) l = level[k[i]] + 1
			level[v] = l; if (l > maxl) maxl = l
			return l
		}
		function sorted(list,    n, a, i, j, t, r) {
			n = split(list, a, " ")
			for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
				t = a[j]; a[j] = a[j - 1]; a[j - 1] = t
			}
			r = ""; for (i = 1; i <= n; i++) r = r " " a[i]
			return r
		}' || { r=$?; [ $r -gt $rc ] && rc=$r; }
	done
	return $rc
}

if [ -n "$fail_dirs" ]; then
	echo "== call cycles between files (object cross-references)"
	# shellcheck disable=SC2086 # one word per directory
	cycles $fail_dirs && exit 0
	echo "code-stats.sh: call cycles between files (docs/architecture.md says which file may call which)" >&2
	exit 1
fi

mods=""
for m in libtoggle proto daemon client util; do [ -d "$m" ] && mods="$mods $m"; done
srcs=$(find $mods -name '*.c' 2>/dev/null | sort)

echo "== functions (definitions at column 0, signature to closing brace)"
# A definition: a line at column 0 ending in ')' (or '{'), then '{' at column 0.
awk '
FNR == 1 { sig = ""; infn = 0 }
infn && /^}/ { n++; len = FNR - start + 1; total += len; print len, FILENAME ":" start, name; infn = 0; next }
infn { next }
/^[A-Za-z_].*\)[ \t]*$/ && !/;[ \t]*$/ { sig = $0; sigline = FNR; next }
/^{/ && sig != "" { infn = 1; start = sigline; name = sig; sub(/\(.*/, "", name); sub(/.*[ *]/, "", name); sig = ""; next }
{ if ($0 !~ /^[ \t]/) sig = "" }
END { printf "functions %d, lines in functions %d, mean %.1f\n", n, total, n ? total / n : 0 > "/dev/stderr" }
' $srcs 2>/tmp/code-stats.$$ | sort -rn > /tmp/code-stats-fn.$$
cat /tmp/code-stats.$$
echo "over 60 lines:"
awk '$1 > 60 {printf "  %4d  %s %s\n", $1, $2, $3; n++} END { printf "%d functions over 60 lines\n", n }' \
	/tmp/code-stats-fn.$$
rm -f /tmp/code-stats.$$ /tmp/code-stats-fn.$$

echo "== include graph (module -> modules whose headers it includes)"
for m in $mods; do
	[ -d "$m" ] || continue
	targets=""
	for inc in $(grep -h '^#include "' $(find "$m" -name '*.[ch]') 2>/dev/null |
		     sed 's/#include "\(.*\)".*/\1/' | sort -u); do
		base=$(basename "$inc")
		for o in $mods; do
			[ "$o" = "$m" ] && continue
			if find "$o" -name "$base" 2>/dev/null | grep -q .; then
				case " $targets " in *" $o "*) ;; *) targets="$targets $o" ;; esac
			fi
		done
	done
	echo "  $m ->${targets:- (none)}"
done

echo "== daemon and CLI sources that reach cuda.h through their includes"
# Headers that include cuda.h, transitively, by name.
cudahdrs="cuda.h"
while :; do
	more=$(grep -l -E "#include [<\"]($(echo $cudahdrs | sed 's/ /|/g'))[>\"]" \
		$(find $mods -name '*.h') 2>/dev/null | xargs -n1 basename 2>/dev/null | sort -u)
	next=$(printf '%s\n' $cudahdrs $more | sort -u | tr '\n' ' ')
	[ "$next" = "$(printf '%s\n' $cudahdrs | sort -u | tr '\n' ' ')" ] && break
	cudahdrs=$next
done
n=0; t=0
for f in $(find $(echo $mods | tr " " "\n" | grep -v libtoggle) -name '*.c' 2>/dev/null); do
	t=$((t + 1))
	if grep -q -E "#include [<\"]($(echo $cudahdrs | sed 's/ /|/g'))[>\"]" "$f" ||
	   grep -h '^#include "' "$f" | sed 's/#include "\(.*\)".*/\1/' | while read -r h; do
		p=$(find $mods -name "$(basename "$h")" | head -1)
		[ -n "$p" ] && grep -q -E "#include [<\"]($(echo $cudahdrs | sed 's/ /|/g'))[>\"]" "$p" && echo y
	   done | grep -q y; then
		n=$((n + 1))
	fi
done
echo "  $n of $t (headers that bring cuda.h: $(echo $cudahdrs))"

echo "== call cycles between files (object cross-references)"
cycles daemon libtoggle/src || :
