#!/bin/sh
# gpu-check.sh - build libtoggle (with device mode's planner and the copy
# producer's kernel) and the GPU programs, then run every leg on the GPU:
#   gpu_check   lazy, eager and device phases, then timing figures
#   gpu_region  producer regions and toggle_copy_out (lazy, eager, device)
#   gpu_guard   issue #10: a failed upload, late producers, reused handles
#   gpu_devtaint device mode's injected device-side failure: tainted launch
#               reported, 0 mismatches otherwise
# Needs only libc, pthreads and CUDA (no libuv, protobuf-c or Check).
# Skips cleanly (exit 0) when nvcc is missing; each program skips when there
# is no CUDA device.  Every leg runs even when an earlier one failed; one
# "gpu-check: leg <name>: PASS|FAIL" line per leg at the end, and the exit
# status is 1 if any leg failed (or did not build).
#
# Usage: scripts/gpu-check.sh [gpu_check args, e.g. --steps N --seed N]
# Environment: GPU_REGION_ARGS (e.g. "--steps 500") for gpu_region.
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

# ---- the legs ------------------------------------------------------------------
# build_leg NAME: examples/NAME.cu -> $B/NAME; 0 or 1.
build_leg() {
	"$NVCC" -O2 -std=c++17 \
		-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
		-Ilibtoggle/include -Ilibtoggle/src -Iexamples -Xcompiler -Wall,-Wextra,-Werror \
		-o "$B/$1" "examples/$1.cu" "$B/libtoggle.a" -ldl -lpthread && return 0
	echo "gpu-check: FAIL (build: $NVCC could not build examples/$1.cu)"
	return 1
}

status=0
results=""
# run_leg NAME ARGS...: build and run one program (output shown as it
# comes), note PASS, SKIPPED (no device: exit 0) or FAIL.
run_leg() {
	name=$1
	shift
	verdict=FAIL
	if build_leg "$name"; then
		echo "gpu-check: running $B/$name $*"
		rm -f "$B/$name.rc"
		{ "$B/$name" "$@"; echo $? >"$B/$name.rc"; } | tee "$B/$name.log"
		if [ "$(cat "$B/$name.rc" 2>/dev/null)" = 0 ]; then
			verdict=PASS
			grep -q ': SKIPPED' "$B/$name.log" && verdict=SKIPPED
		fi
	fi
	[ "$verdict" = FAIL ] && status=1
	results="$results
gpu-check: leg $name: $verdict"
}

run_leg gpu_check "$@"
# shellcheck disable=SC2086 # GPU_REGION_ARGS is a list of words
run_leg gpu_region ${GPU_REGION_ARGS:-}
run_leg gpu_devtaint
run_leg gpu_guard

printf '%s\n' "$results" | sed '/^$/d'
if [ "$status" -eq 0 ]; then
	echo "gpu-check: no leg failed"
else
	echo "gpu-check: FAIL (a leg failed: see above)"
fi
exit "$status"
