#!/bin/sh
# gpu-check.sh - build libtoggle (with device mode's planner) and
# examples/gpu_check.cu, then run the proof on the GPU: lazy, eager and device
# phases, then timing figures.  Needs only libc, pthreads and CUDA (no libuv,
# protobuf-c or Check).  Then the Python leg (torch_proof.py) where python3
# has torch and a GPU: libtoggle.so from the same build, the package from
# python/.
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
status=0
"$B/gpu_check" "$@" || status=$?

# ---- the Python leg: graphtoggle from PyTorch (python/tests/gpu/torch_proof.py) ----------
# Runs when python3 imports torch and torch sees a GPU; the script says SKIPPED otherwise.
# Arguments: $TORCH_PROOF_ARGS (e.g. "--steps 10000 --bench").
PYTHON=${PYTHON:-python3}
if command -v "$PYTHON" >/dev/null 2>&1; then
	echo "gpu-check: running python/tests/gpu/torch_proof.py ${TORCH_PROOF_ARGS:-}"
	# shellcheck disable=SC2086 # word splitting of the argument list is wanted
	GRAPHTOGGLE_LIB="$PWD/$B/libtoggle.so" PYTHONUNBUFFERED=1 \
		"$PYTHON" python/tests/gpu/torch_proof.py ${TORCH_PROOF_ARGS:-} || status=1
	# the example engine standalone (nn.Module forward-hook producers, graphs per batch
	# size captured by its own code under the patch), every replay checked
	for mode in lazy device; do
		echo "gpu-check: running examples/torch_engine.py --mode $mode"
		GRAPHTOGGLE_LIB="$PWD/$B/libtoggle.so" PYTHONUNBUFFERED=1 \
			"$PYTHON" examples/torch_engine.py --mode $mode --steps 3000 --check-every 1 \
			--change-every 100 || status=1
	done
else
	echo "gpu-check: python leg SKIPPED: no $PYTHON"
fi
exit $status
