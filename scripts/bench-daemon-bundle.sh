#!/bin/sh
# bench-daemon-bundle.sh [OLD_REV] - toggled, togglectl and bench_daemon with every
# shared library they load, in .gpu/benchd/ (ignored), for a machine that
# has none of our -dev packages (the GPU host: a quiet 16-core machine,
# where the daemon's own work is what the reads-under-load row shows).
#   new/  this checkout's build (togglectl too: gpu-check.sh's record_daemon_proof and
#         bench/record_bench.py find toggled and togglectl here)
#   old/  OLD_REV's build (a temporary git worktree), if given
#   lib/  the libraries ldd names, but the C library's own
#   run.sh  interleaved runs: ROUNDS (3), RUNS ("old:8 new:4": BUILD:frames_per_turn),
#           ARGS (--rows reads), BENCH (the bench_daemon that drives every build:
#           each build's own unless given, e.g. BENCH=new), TMPDIR (where the
#           daemon's state directory goes: .gpu/benchd/tmp, on the machine's disk,
#           unless given; its file system is printed); each run's output as it comes
# Then, on that machine: .gpu/benchd/run.sh (the device tool: carry .gpu/benchd).
# The checkpoint row (issue 30 item 3), old = main, every build driven by the
# new bench:
#   scripts/bench-daemon-bundle.sh main, then there
#   ROUNDS=5 RUNS="old:8 new:8" BENCH=new ARGS="--rows checkpoint --seconds 10" .gpu/benchd/run.sh
set -eu
cd "$(dirname "$0")/.."
D=.gpu/benchd
B=${B:-build}
mkdir -p "$D/new" "$D/lib"
make -s "$B/toggled" "$B/togglectl" "$B/bench/bench_daemon"
cp "$B/toggled" "$B/togglectl" "$B/bench/bench_daemon" "$D/new/"
if [ $# -ge 1 ]; then
	wt=$(mktemp -d /tmp/benchd-old.XXXXXX)
	git worktree add -q --detach "$wt" "$1"
	(cd "$wt" && make -s build/toggled build/bench/bench_daemon)
	mkdir -p "$D/old"
	cp "$wt/build/toggled" "$wt/build/bench/bench_daemon" "$D/old/"
	git worktree remove --force "$wt"
fi
for bin in "$D"/*/toggled "$D"/*/togglectl "$D"/*/bench_daemon; do
	[ -x "$bin" ] || continue # old/ has no togglectl
	ldd "$bin" | awk '$3 ~ /^\// { print $3 }'
done | sort -u | grep -v -E '/(libc|libm|libresolv|libpthread|libdl|ld-linux[^/]*)\.so' |
	while read -r lib; do cp -L "$lib" "$D/lib/"; done
cat >"$D/run.sh" <<'RUN'
#!/bin/sh
# Interleaved bench_daemon runs (written by scripts/bench-daemon-bundle.sh).
cd "$(dirname "$0")"
export LD_LIBRARY_PATH="$PWD/lib"
# The state directory on the machine's disk, not a tmpfs /tmp: the saves' syncs are the point.
export TMPDIR="${TMPDIR:-$PWD/tmp}"
mkdir -p "$TMPDIR"
echo "cores $(nproc), $(uname -r), TMPDIR $TMPDIR on $(df -PT "$TMPDIR" | awk 'NR == 2 { print $2, $1 }')"
for r in $(seq 1 "${ROUNDS:-3}"); do
	for bc in ${RUNS:-old:8 new:4}; do
		b=${bc%%:*}
		cap=${bc##*:}
		[ -x "$b/toggled" ] || continue
		printf 'frames_per_turn = %s\n' "$cap" >"/tmp/benchd-$cap.conf"
		echo "== round $r build $b frames_per_turn $cap $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
		# shellcheck disable=SC2086 # ARGS is a list of words
		"./${BENCH:-$b}/bench_daemon" --toggled "./$b/toggled" --config "/tmp/benchd-$cap.conf" ${ARGS:---rows reads}
	done
done
RUN
chmod +x "$D/run.sh"
du -sh "$D"
