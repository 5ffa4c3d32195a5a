#!/usr/bin/env bash
# bench/cluster.sh - the cluster benchmark (make bench-cluster): a private
# 3-member etcd on 127.0.0.1 (free ports, data directories on /dev/shm when
# there is one), then bench_cluster for each hosts x agents row: 3 x 16
# (1,000 cluster sets) and 50 x 2 (200): the fan-out, the catch-up of a host
# killed with -9, the idle connections and TIME_WAIT sockets, and the time
# from a hung member (SIGSTOP of the one the hosts watch) to every agent
# updated (docs/benchmarks.md, section 9).  Figures only.
#   B=build bench/cluster.sh [bench_cluster options, for every row]
#   ROWS="3x16 50x2" B=build bench/cluster.sh
#   BASELINE_B=/path/to/main/build B=build bench/cluster.sh
set -eu
B=${B:-build}
ROWS=${ROWS:-3x16 50x2}
command -v etcd >/dev/null || { echo "bench/cluster.sh: etcd is not installed (scripts/deps.sh)" >&2; exit 1; }
base=/tmp
[ -d /dev/shm ] && [ -w /dev/shm ] && base=/dev/shm
T=$(mktemp -d "$base/tg-bcl-etcd.XXXXXX")
read -r C1 P1 C2 P2 C3 P3 < <(python3 -c '
import socket
s = [socket.socket() for _ in range(6)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
URLS=http://127.0.0.1:$C1,http://127.0.0.1:$C2,http://127.0.0.1:$C3
OTHERS=http://127.0.0.1:$C2,http://127.0.0.1:$C3
INIT=m1=http://127.0.0.1:$P1,m2=http://127.0.0.1:$P2,m3=http://127.0.0.1:$P3
PIDS=()
member() { # NAME CLIENT PEER
	etcd --name "$1" --data-dir "$T/$1" --listen-client-urls "http://127.0.0.1:$2" \
		--advertise-client-urls "http://127.0.0.1:$2" --listen-peer-urls "http://127.0.0.1:$3" \
		--initial-advertise-peer-urls "http://127.0.0.1:$3" --initial-cluster "$INIT" \
		--initial-cluster-token tgbench --initial-cluster-state new >"$T/$1.log" 2>&1 &
	PIDS+=($!)
}
stop() {
	for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$T"
}
trap stop EXIT
member m1 "$C1" "$P1"
member m2 "$C2" "$P2"
member m3 "$C3" "$P3"
# healthy SECS: every member answers within SECS, else the members' logs and exit 1.
healthy() {
	local end=$((SECONDS + $1))
	while [ "$SECONDS" -lt "$end" ]; do
		ETCDCTL_API=3 etcdctl --endpoints "$URLS" --command-timeout=1s endpoint health >/dev/null 2>&1 &&
			return 0
		sleep 0.1
	done
	echo "bench/cluster.sh: the 3 etcd members are not healthy after $1 s (a port taken?):" >&2
	tail -n 3 "$T"/m?.log >&2
	exit 1
}
healthy 20
echo "etcd $(etcd --version | sed -n 's/^etcd Version: //p'), 3 members at $URLS, data in $T; $(nproc) cores"
rc=0
# BASELINE_B=DIR: first the 3 x 16 row with another build's toggled and
# bench_cluster (main's, say) on the same members, for ratios of one run.
if [ -n "${BASELINE_B:-}" ]; then
	echo "== baseline ($BASELINE_B): 3 hosts x 16 agents"
	TMPDIR=$base "$BASELINE_B/bench/bench_cluster" --toggled "$BASELINE_B/toggled" --etcd "$URLS" \
		--hosts 3 --agents 16 --changes 1000 || rc=$?
	healthy 20
fi
for row in $ROWS; do
	h=${row%x*} a=${row#*x}
	changes=1000
	[ "$h" -gt 10 ] && changes=200
	echo "== $h hosts x $a agents"
	TMPDIR=$base "$B/bench/bench_cluster" --toggled "$B/toggled" --etcd "$URLS" --hosts "$h" \
		--agents "$a" --changes "$changes" --stop-pid "${PIDS[0]}" --others "$OTHERS" "$@" || rc=$?
	healthy 20 # m1 was stopped and continued: healthy again before the next row
done
stop
trap - EXIT
exit "$rc"
