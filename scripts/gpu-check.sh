#!/bin/sh
# gpu-check.sh - build libtoggle (with device mode's planner) and
# examples/gpu_check.cu, then run the proof on the GPU: lazy, eager and device
# phases, then timing figures.  Needs only libc, pthreads and CUDA (no libuv,
# protobuf-c or Check).
# Skips cleanly (exit 0) when nvcc is missing; the program itself skips when
# there is no CUDA device.  Otherwise exits with the program's status.
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

echo "gpu-check: running $B/gpu_check $*"
exec "$B/gpu_check" "$@"
