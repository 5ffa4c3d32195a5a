#!/bin/sh
# deps.sh - install the Debian packages the build needs, when they are missing.
# Called by the make targets that need them; on a fresh machine, where even
# make is missing, run it once by hand first (the README says so).
# Usage: scripts/deps.sh [build|bench]   (build: the toolchain, the libraries
# and Check; bench: + valgrind and gnuplot)
set -eu

# The toolchain: make, a C compiler with libc headers, and g++, which nvcc
# calls as its host compiler (without it: "cannot execute 'cc1plus'").
pkgs="make gcc g++ libc6-dev pkg-config"
# systemd-analyze verify of the units (tests/systemd/run.sh) resolves
# ExecReload=/bin/kill: procps
pkgs="$pkgs procps"
pkgs="$pkgs libuv1-dev libprotobuf-c-dev protobuf-c-compiler libjansson-dev check python3 python3-pytest"
# The Python package as the README installs it (a venv: python3-venv) and as
# tests/pypkg/run.sh builds it (pip wheel, python3 -m build, setuptools, wheel)
pkgs="$pkgs python3-venv python3-pip python3-build python3-setuptools python3-wheel"
# --metrics (libmicrohttpd); graphtoggle.client (protoc, the protobuf runtime) and its tests
# (zlib: /metrics gzipped when the scraper asks)
pkgs="$pkgs libprotobuf-dev libmicrohttpd-dev zlib1g-dev protobuf-compiler python3-protobuf python3-prometheus-client"
# tests/proto/run.sh: the public contract through protoc-gen-go (small; no Go toolchain)
pkgs="$pkgs protoc-gen-go"
# The cluster layer (docs/cluster.md): libcurl for the etcd client; etcd and
# etcdctl for tests/cluster/run.sh, which fails without them.
pkgs="$pkgs libcurl4-openssl-dev etcd-server etcd-client"
case "${1:-build}" in
build) ;;
bench) pkgs="$pkgs valgrind gnuplot-nox" ;;
*) echo "deps.sh: unknown set '$1' (expected build or bench)" >&2; exit 2 ;;
esac

missing=""
for p in $pkgs; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
	echo "deps.sh: missing packages:$missing, and no apt-get to install them" >&2
	exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
		echo "deps.sh: missing packages:$missing; run as root or install sudo" >&2
		exit 1
	fi
fi
# apt and dpkg print a few lines per package (~500 on a fresh machine): into a
# log, its tail shown if the install fails; V=1 shows everything.
log=${TMPDIR:-/tmp}/graphtoggle-deps.$$.log
if [ "${V:-0}" = 1 ]; then log=/dev/stderr; fi
n=$(echo $missing | wc -w)
echo "deps.sh: installing $n package(s):$missing$([ "$log" = /dev/stderr ] || echo " (log: $log)")" >&2
export DEBIAN_FRONTEND=noninteractive
fail_log() {
	if [ "$log" != /dev/stderr ]; then tail -n 30 "$log" >&2; fi
	echo "deps.sh: apt-get failed (full log: $log)" >&2
	exit 1
}
$sudo apt-get update -qq >>"$log" 2>&1 || fail_log
# etcd-server's maintainer scripts start its service.  Where no init system
# runs (a CI container: no systemd, invoke-rc.d finds no runlevel), a
# policy-rc.d that forbids every start makes that explicit, so that the
# install neither starts a stray etcd nor waits on one; the tests start
# their own on free loopback ports.  Never over an existing policy-rc.d.
policy=""
if [ ! -d /run/systemd/system ] && [ ! -e /usr/sbin/policy-rc.d ]; then
	policy=/usr/sbin/policy-rc.d
	printf '#!/bin/sh\n# deps.sh: no service starts during this install\nexit 101\n' |
		$sudo tee "$policy" >/dev/null
	$sudo chmod 755 "$policy"
	trap '$sudo rm -f "$policy"' EXIT
fi
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $missing >>"$log" 2>&1 || fail_log
if [ "$log" != /dev/stderr ]; then rm -f "$log"; fi
echo "deps.sh: installed$missing" >&2
