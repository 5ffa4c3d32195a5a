#!/bin/sh
# gpu-check.sh - build libtoggle (with device mode's planner),
# examples/gpu_check.cu and examples/gpu_guard.cu, then run on the GPU: the
# proof (lazy, eager and device phases, then timing figures), then the guard
# legs of issue #10 (failed upload, late producers, handle reuse).  Needs
# only libc, pthreads and CUDA (no libuv, protobuf-c or Check).
# Skips cleanly (exit 0) when nvcc is missing; each program itself skips when
# there is no CUDA device.  Every program runs; one line per program says
# PASS or FAIL, and the script exits 1 if any failed.
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

# ---- the proof program --------------------------------------------------------
"$NVCC" -O2 -std=c++17 \
	-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
	-Ilibtoggle/include -Iexamples -Xcompiler -Wall,-Wextra,-Werror \
	-o "$B/gpu_check" examples/gpu_check.cu "$B/libtoggle.a" -ldl -lpthread ||
	fail "build: $NVCC could not build examples/gpu_check.cu"

# ---- issue #10's guard legs (includes libtoggle's private header: it wraps
# the agent's driver table to make cuGraphUpload fail) --------------------------
"$NVCC" -O2 -std=c++17 \
	-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
	-Ilibtoggle/include -Ilibtoggle/src -Iexamples -Xcompiler -Wall,-Wextra,-Werror \
	-o "$B/gpu_guard" examples/gpu_guard.cu "$B/libtoggle.a" -ldl -lpthread ||
	fail "build: $NVCC could not build examples/gpu_guard.cu"

# Every program runs, whatever the one before it did.
status=0
summary=""
run() {
	name=$1
	shift
	echo "gpu-check: running $B/$name $*"
	rc=0
	"$B/$name" "$@" || rc=$?
	if [ "$rc" -eq 0 ]; then
		summary="$summary
gpu-check: program $name: PASS (or SKIPPED, see above)"
	else
		summary="$summary
gpu-check: program $name: FAIL (exit $rc)"
		status=1
	fi
}
run gpu_check "$@"
run gpu_guard
printf '%s\n' "$summary" | sed '/^$/d'
exit $status
