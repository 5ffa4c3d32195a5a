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

if command -v nvidia-smi >/dev/null 2>&1; then
	gpus=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1) ||
		gpus="nvidia-smi failed: $gpus"
	printf '%s\n' "$gpus" | sed 's/^/gpu-check: gpu: /'
else
	echo "gpu-check: gpu: nvidia-smi not available"
fi
echo "gpu-check: nvcc: $("$NVCC" --version | grep -i 'release' | tail -n 1)"

# ---- device mode's planner: a fatbin embedded as bytes (libtoggle/libtoggle.mk) ---
mkdir -p "$B/obj" "$B/gen"
"$NVCC" --fatbin -O3 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
	-Ilibtoggle/src -o "$B/gen/tg_planner.fatbin" libtoggle/src/planner.cu ||
	fail "build: $NVCC could not build libtoggle/src/planner.cu"
scripts/embed.sh "$B/gen/tg_planner.fatbin" "$B/gen/tg_planner_fatbin.h" tg_planner_fatbin_bytes ||
	fail "build: could not embed the planner"

# ---- libtoggle: objects and a static archive --------------------------------
# -Iproto: the agent's daemon connection uses the wire constants in
# proto/toggle_proto.h (header only; libtoggle encodes protobuf itself).
objs=""
found=0
for src in libtoggle/src/*.c; do
	[ -e "$src" ] || break
	found=1
	obj="$B/obj/$(basename "$src" .c).o"
	extra=""
	[ "$src" = libtoggle/src/planner_image.c ] && extra="-DTG_HAVE_PLANNER_FATBIN -I$B/gen"
	# shellcheck disable=SC2086 # $extra is empty or two flags without spaces
	"$CC" -std=c17 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror $extra \
		-Ilibtoggle/include -Iproto -isystem "$CUDA_HOME/include" -c "$src" -o "$obj" ||
		fail "build: $CC could not compile $src"
	objs="$objs $obj"
done
[ "$found" -eq 1 ] || fail "build: no libtoggle sources in libtoggle/src"
rm -f "$B/libtoggle.a"
# shellcheck disable=SC2086 # $objs is a list of paths without spaces
ar rcs "$B/libtoggle.a" $objs || fail "build: ar could not make $B/libtoggle.a"

# ---- the proof program --------------------------------------------------------
"$NVCC" -O2 -std=c++17 \
	-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
	-Ilibtoggle/include -Xcompiler -Wall,-Wextra,-Werror \
	-o "$B/gpu_check" examples/gpu_check.cu "$B/libtoggle.a" -ldl -lpthread ||
	fail "build: $NVCC could not build examples/gpu_check.cu"

echo "gpu-check: running $B/gpu_check $*"
exec "$B/gpu_check" "$@"
