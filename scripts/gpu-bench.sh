#!/bin/sh
# gpu-bench.sh - build libtoggle and bench/gpu_bench.cu, then print the GPU
# figures of graphtoggle (issue #5: replay time of L-layer chains, the cost of
# changing the producer set by six methods).  Figures only: nothing is
# asserted about speed; the program checks only which producers ran.
# Needs only libc, pthreads and CUDA (no libuv, protobuf-c or Check), like
# scripts/gpu-check.sh, whose build it repeats into its own directory.
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

# ---- device mode's planner, embedded as libtoggle/libtoggle.mk does ------------
# planner.cu -> fatbin -> a header of bytes; planner_image.c then carries it
# (-DTG_HAVE_PLANNER_FATBIN).  Without planner.cu: no device mode to measure.
mkdir -p "$B/obj" "$B/gen"
rm -f "$B"/obj/*.o "$B"/gen/*
planner_flags=""
if [ -e libtoggle/src/planner.cu ]; then
	"$NVCC" --fatbin -O3 \
		-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
		-Ilibtoggle/src -o "$B/gen/tg_planner.fatbin" libtoggle/src/planner.cu ||
		fail "build: $NVCC could not build libtoggle/src/planner.cu"
	scripts/embed.sh "$B/gen/tg_planner.fatbin" "$B/gen/tg_planner_fatbin.h" \
		tg_planner_fatbin_bytes || fail "build: scripts/embed.sh failed"
	planner_flags="-DTG_HAVE_PLANNER_FATBIN -I$B/gen"
	echo "gpu-bench: device mode's planner embedded"
fi

# ---- libtoggle: objects and a static archive (as scripts/gpu-check.sh) --------
objs=""
found=0
for src in libtoggle/src/*.c; do
	[ -e "$src" ] || break
	found=1
	obj="$B/obj/$(basename "$src" .c).o"
	extra=""
	[ "$(basename "$src")" = planner_image.c ] && extra=$planner_flags
	# shellcheck disable=SC2086 # $extra is a list of flags without spaces
	"$CC" -std=c17 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror $extra \
		-Ilibtoggle/include -Iproto -isystem "$CUDA_HOME/include" -c "$src" -o "$obj" ||
		fail "build: $CC could not compile $src"
	objs="$objs $obj"
done
[ "$found" -eq 1 ] || fail "build: no libtoggle sources in libtoggle/src"
rm -f "$B/libtoggle.a"
# shellcheck disable=SC2086 # $objs is a list of paths without spaces
ar rcs "$B/libtoggle.a" $objs || fail "build: ar could not make $B/libtoggle.a"

# ---- the benchmark -------------------------------------------------------------
"$NVCC" -O2 -std=c++17 \
	-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
	-Ilibtoggle/include -Xcompiler -Wall,-Wextra,-Werror \
	-o "$B/gpu_bench" bench/gpu_bench.cu "$B/libtoggle.a" -ldl -lpthread ||
	fail "build: $NVCC could not build bench/gpu_bench.cu"

echo "gpu-bench: running $B/gpu_bench $*"
exec "$B/gpu_bench" "$@"
