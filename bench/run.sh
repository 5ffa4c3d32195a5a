#!/bin/sh
# run.sh - the host benchmarks (make bench): prints the tables that
# docs/benchmarks.md records.  Medians over repetitions; ratios against a
# baseline measured in the same run.  Instruction counts from callgrind.
set -eu
B=${B:-build}
echo "bench: $(uname -srm), $(nproc) cores, $(gcc --version | head -n 1)"
echo "bench: $(date -u +%Y-%m-%dT%H:%MZ)"
echo

"$B/bench/bench_host" hotpath --reps 21 --iters 2000000
echo

# Instructions per launch: the difference between two runs of N1 and N2
# launches, divided by N2-N1, cancels start-up and teardown exactly.
ir() {
	valgrind --tool=callgrind --callgrind-out-file=/dev/null \
		"$B/bench/bench_host" hotpath --mode "$1" --iters "$2" 2>&1 |
		sed -n 's/.*Collected : *\([0-9]*\).*/\1/p'
}
if command -v valgrind >/dev/null 2>&1; then
	a1=$(ir agent 100000) a2=$(ir agent 200000)
	d1=$(ir direct 100000) d2=$(ir direct 200000)
	p1=$(ir prepare 100000) p2=$(ir prepare 200000)
	awk -v a1="$a1" -v a2="$a2" -v d1="$d1" -v d2="$d2" -v p1="$p1" -v p2="$p2" 'BEGIN {
		a = (a2 - a1) / 100000; d = (d2 - d1) / 100000; p = (p2 - p1) / 100000
		printf "hotpath instructions (callgrind): direct %.1f, toggle_graph_launch %.1f, added %.1f per launch\n", d, a, a - d
		printf "hotpath instructions (callgrind): toggle_graph_prepare + direct launch %.1f, added %.1f per launch\n", p, p - d }'
else
	echo "hotpath instructions: valgrind not installed, skipped"
fi
echo

"$B/bench/bench_host" apply --reps 21
echo
"$B/bench/bench_host" switch --reps 21 --iters 200000
echo
"$B/bench/bench_host" step --reps 15 --iters 200000
echo
"$B/bench/bench_host" idle --reps 15 --iters 20000
echo

# The daemon saves what it acknowledges (fsync) before replying: the round
# trip depends on the file system of the state directory, so both a disk
# and, where there is one, tmpfs.
if [ -x "$B/bench/bench_daemon" ] && [ -x "$B/toggled" ]; then
	echo "state directory on $(df -T "${TMPDIR:-/tmp}" | awk 'NR==2 {print $2}') (${TMPDIR:-/tmp}):"
	"$B/bench/bench_daemon" --toggled "$B/toggled"
	echo
	echo "writes under a scrape flood (issue 30; docs/reliability.md section 9):"
	"$B/bench/bench_daemon" --toggled "$B/toggled" --rows flood
	if [ -d /dev/shm ]; then
		echo
		echo "state directory on tmpfs (/dev/shm):"
		TMPDIR=/dev/shm "$B/bench/bench_daemon" --toggled "$B/toggled"
	fi
fi
