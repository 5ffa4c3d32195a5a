#!/bin/sh
# gpu-check.sh - build libtoggle (with device mode's planner),
# examples/gpu_check.cu and examples/gpu_devtaint.cu, then run the legs on
# the GPU: the proof (lazy, eager and device phases, then timing figures),
# then device mode's injected device-side failure (tainted launch reported,
# 0 mismatches otherwise).  Needs only libc, pthreads and CUDA (no libuv,
# protobuf-c or Check).
# Skips cleanly (exit 0) when nvcc is missing; each program skips when there
# is no CUDA device.  Every leg runs; prints "gpu-check: leg NAME: PASS",
# "FAIL (exit N)" or "SKIPPED" per leg and exits 1 if any leg failed.
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

# ---- the programs -------------------------------------------------------------
"$NVCC" -O2 -std=c++17 \
	-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
	-Ilibtoggle/include -Iexamples -Xcompiler -Wall,-Wextra,-Werror \
	-o "$B/gpu_check" examples/gpu_check.cu "$B/libtoggle.a" -ldl -lpthread ||
	fail "build: $NVCC could not build examples/gpu_check.cu"
# gpu_devtaint reaches into the agent (white-box), hence -Ilibtoggle/src.
"$NVCC" -O2 -std=c++17 \
	-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
	-Ilibtoggle/include -Ilibtoggle/src -Iexamples -Xcompiler -Wall,-Wextra,-Werror \
	-o "$B/gpu_devtaint" examples/gpu_devtaint.cu "$B/libtoggle.a" -ldl -lpthread ||
	fail "build: $NVCC could not build examples/gpu_devtaint.cu"

# Every leg runs whatever the others did; one verdict line per leg, and the
# script fails if any leg failed.
status=0
run_leg() {
	leg=$1
	shift
	echo "gpu-check: running $B/$leg $*"
	# Output shown as it comes (and kept for the verdict); the status via a file.
	rm -f "$B/$leg.rc"
	{
		rc=0
		"$B/$leg" "$@" 2>&1 || rc=$?
		echo "$rc" >"$B/$leg.rc"
	} | tee "$B/$leg.log"
	rc=$(cat "$B/$leg.rc" 2>/dev/null || echo 1)
	if [ "$rc" -ne 0 ]; then
		echo "gpu-check: leg $leg: FAIL (exit $rc)"
		status=1
	elif grep -q ': SKIPPED' "$B/$leg.log"; then
		echo "gpu-check: leg $leg: SKIPPED"
	else
		echo "gpu-check: leg $leg: PASS"
	fi
}
run_leg gpu_check "$@"
run_leg gpu_devtaint
exit $status
