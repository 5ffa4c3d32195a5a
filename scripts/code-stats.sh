#!/bin/sh
# code-stats.sh [DIR] - the shape figures issue 16 asks for, of the C tree
# in DIR (default .): the longest functions, the include graph between the
# modules, and how many sources of the daemon and the CLI include cuda.h
# (directly or through a header).  Pure text: no build, no compiler.
#   scripts/code-stats.sh            this checkout
#   git worktree add /tmp/old REV && scripts/code-stats.sh /tmp/old
set -eu
dir=${1:-.}
cd "$dir"
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
