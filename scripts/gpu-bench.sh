#!/bin/sh
# gpu-bench.sh - build libtoggle and bench/gpu_bench.cu, then print the GPU
# figures of graphtoggle (issue #5: replay time of L-layer chains, the cost of
# changing the producer set by six methods).  Figures only: nothing is
# asserted about speed; the program checks only which producers ran.
# Needs only libc, pthreads and CUDA (no libuv, protobuf-c or Check), like
# scripts/gpu-check.sh, whose build (scripts/gpu-lib.sh) it shares, in its own directory.
# Skips cleanly (exit 0) when nvcc is missing; the program itself skips when
# there is no CUDA device.  With $OUT set, the full results go to
# $OUT/gpu_bench.csv (medians, min, max) and $OUT/gpu_bench_raw.csv (every
# repetition).  The tables come last.
#
# Usage: scripts/gpu-bench.sh [gpu_bench args: --reps N --replays N --layers 32,128]
# Environment: CUDA_HOME (default /usr/local/cuda), CC (default cc), NVCC.
set -eu

cd "$(dirname "$0")/.."

CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA_HOME/bin/nvcc}
CC=${CC:-cc}
B=build/gpu-bench

fail() {
	echo "gpu-bench: FAIL ($*)"
	exit 1
}

if [ ! -x "$NVCC" ]; then
	echo "gpu-bench: SKIPPED: nvcc not found at $NVCC"
	exit 0
fi

echo "gpu-bench: host: $(uname -srm), $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
if command -v nvidia-smi >/dev/null 2>&1; then
	gpus=$(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit \
		--format=csv,noheader 2>&1) || gpus="nvidia-smi failed: $gpus"
	printf '%s\n' "$gpus" | sed 's/^/gpu-bench: gpu (name, driver, sm clock, max sm clock, power limit): /'
else
	echo "gpu-bench: gpu: nvidia-smi not available"
fi
echo "gpu-bench: nvcc: $("$NVCC" --version | grep -i 'release' | tail -n 1)"
echo "gpu-bench: cc: $("$CC" --version | head -n 1)"

TAG=gpu-bench
. scripts/gpu-lib.sh
gpu_build_libtoggle

# ---- the benchmark -------------------------------------------------------------
"$NVCC" -O2 -std=c++17 \
	-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
	-Ilibtoggle/include -Iexamples -Xcompiler -Wall,-Wextra,-Werror \
	-o "$B/gpu_bench" bench/gpu_bench.cu "$B/libtoggle.a" -ldl -lpthread ||
	fail "build: $NVCC could not build bench/gpu_bench.cu"

echo "gpu-bench: running $B/gpu_bench $*"
exec "$B/gpu_bench" "$@"
