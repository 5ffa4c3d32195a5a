#!/bin/sh
# gpu-check.sh - build libtoggle (with device mode's planner),
# examples/gpu_check.cu and examples/gpu_bare.cu, then run the proofs on the
# GPU: gpu_check (lazy, eager and device phases, then timing figures), then
# gpu_bare (the producer-free exec: what ran, in which order, its figures).
# Needs only libc, pthreads and CUDA (no libuv, protobuf-c or Check).
# Skips cleanly (exit 0) when nvcc is missing; the programs themselves skip
# when there is no CUDA device.  Every program runs; the script prints one
# "gpu-check: leg NAME: PASS|FAIL|SKIPPED" line per program and exits 1 if
# any failed.
#
# Usage: scripts/gpu-check.sh [gpu_check args, e.g. --steps N --seed N]
# Environment: CUDA_HOME (default /usr/local/cuda), CC (default cc), NVCC.
set -eu

cd "$(dirname "$0")/.."

CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA_HOME/bin/nvcc}
CC=${CC:-cc}
B=build/gpu

fail() {
	echo "gpu-check: FAIL ($*)"
	exit 1
}

if [ ! -x "$NVCC" ]; then
	echo "gpu-check: SKIPPED: nvcc not found at $NVCC"
	exit 0
fi

TAG=gpu-check
. scripts/gpu-lib.sh
gpu_describe
gpu_build_libtoggle

# ---- the proof programs ---------------------------------------------------------
for prog in examples/gpu_check.cu examples/gpu_bare.cu; do
	"$NVCC" -O2 -std=c++17 \
		-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
		-Ilibtoggle/include -Iexamples -Xcompiler -Wall,-Wextra,-Werror \
		-o "$B/$(basename "$prog" .cu)" "$prog" "$B/libtoggle.a" -ldl -lpthread ||
		fail "build: $NVCC could not build $prog"
done

# ---- every leg runs, whatever the one before did -----------------------------------
# run_leg NAME CMD...: output shown as it comes and kept in $B/NAME.log, status in $B/NAME.rc.
run_leg() {
	name=$1
	shift
	echo "gpu-check: running $*"
	rm -f "$B/$name.rc"
	{ "$@" 2>&1 && echo 0 >"$B/$name.rc" || echo $? >"$B/$name.rc"; } | tee "$B/$name.log"
}
run_leg gpu_check "$B/gpu_check" "$@"
run_leg gpu_bare "$B/gpu_bare"

# One verdict line per leg, then the producer-free exec's figures again, for pasting.
status=0
for leg in gpu_check gpu_bare; do
	rc=$(cat "$B/$leg.rc" 2>/dev/null || echo 1)
	if [ "$rc" != 0 ]; then
		verdict=FAIL
		status=1
	elif grep -q ': SKIPPED' "$B/$leg.log"; then
		verdict=SKIPPED
	else
		verdict=PASS
	fi
	echo "gpu-check: leg $leg: $verdict (exit $rc)"
done
grep -h '^gpu-bare: figures:' "$B/gpu_bare.log" || true
exit $status
