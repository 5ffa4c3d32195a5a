#!/usr/bin/env bash
# bench/cluster.sh - the cluster benchmark (make bench-cluster): a private
# etcd on 127.0.0.1 (free ports, its data directory on /dev/shm when there is
# one), then bench_cluster: 3 hosts x 16 agents, 1,000 cluster sets, and the
# catch-up of a host killed with -9 (docs/benchmarks.md).  Figures only.
#   B=build bench/cluster.sh [bench_cluster options]
set -eu
B=${B:-build}
command -v etcd >/dev/null || { echo "bench/cluster.sh: etcd is not installed (scripts/deps.sh)" >&2; exit 1; }
base=/tmp
[ -d /dev/shm ] && [ -w /dev/shm ] && base=/dev/shm
T=$(mktemp -d "$base/tg-bcl-etcd.XXXXXX")
read -r CPORT PPORT < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
URL=http://127.0.0.1:$CPORT
etcd --name b --data-dir "$T/etcd" --listen-client-urls "$URL" --advertise-client-urls "$URL" \
	--listen-peer-urls "http://127.0.0.1:$PPORT" --initial-advertise-peer-urls "http://127.0.0.1:$PPORT" \
	--initial-cluster "b=http://127.0.0.1:$PPORT" >"$T/etcd.log" 2>&1 &
EPID=$!
stop() { kill "$EPID" 2>/dev/null || true; wait "$EPID" 2>/dev/null || true; rm -rf "$T"; }
trap stop EXIT
for _ in $(seq 100); do
	ETCDCTL_API=3 etcdctl --endpoints "$URL" --command-timeout=1s endpoint health >/dev/null 2>&1 && break
	sleep 0.1
done
echo "etcd $(etcd --version | sed -n 's/^etcd Version: //p') at $URL, data in $T; $(nproc) cores"
rc=0
TMPDIR=$base "$B/bench/bench_cluster" --toggled "$B/toggled" --etcd "$URL" "$@" || rc=$?
stop
trap - EXIT
exit "$rc"
