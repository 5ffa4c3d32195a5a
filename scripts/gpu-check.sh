#!/bin/sh
# gpu-check.sh - build libtoggle (with device mode's planner and the copy
# producer's kernel) and the GPU programs, then run every leg on the GPU:
#   gpu_check   lazy, eager and device phases, then timing figures
#   gpu_region  producer regions and toggle_copy_out (lazy, eager, device)
#   gpu_devtaint device mode's injected device-side failure: tainted launch
#               reported, 0 mismatches otherwise
#   gpu_devbare issue #31: device mode's producer-free exec (assembled, no
#               clone): all off runs no producer, mixed steps exact, figures
#   gpu_devfull issue #31: device mode's full exec (no planner, producers plain):
#               all on runs every producer and no planner, mixed steps exact
#               (all on, all off, mixed, two streams), all-on figures device
#               vs lazy, host us per step
#   gpu_guard   issue #10: a failed upload, late producers, reused handles
#   gpu_lifetime issue #28: recorded graphs destroyed, strangers captured until
#               the driver reuses their handles and node handles (how often is
#               reported), every stranger launched untouched and exact; a graph
#               destroyed before its exec; a bound exec destroyed
#   gpu_bare    issue #14: the producer-free exec (what ran, in which order,
#               outputs equal to the main exec's; the lazy legs assembled, the
#               default, and again with clone_execs), its figures
#   torch_proof graphtoggle from PyTorch (python/tests/gpu/torch_proof.py)
#   torch_compile_proof  issue #23: the producer op under torch.compile (fullgraph,
#               engine-captured graphs per batch size in one pool; CUDA Graph Trees;
#               eager runs; a size compiled before attach() refused at the next step),
#               lazy and device (python/tests/gpu/torch_compile_proof.py;
#               ~20-60 s, most of it torch.compile)
#   torch_engine_lazy, torch_engine_device  examples/torch_engine.py standalone
#   record_proof  issue #24: the example engine recorded into the agent's data ring
#               (lazy, device): every record equals its step's and hook's monitor
#               buffer, none outside the step's set, the ring forced full: drops
#               counted, nothing wrong recorded (python/tests/gpu/record_proof.py)
#   gpu_record  issue #24's staged recorder (gather kernel into device staging on
#               the replay's stream, host copies on the recorder's own): 48 hooks of 1 B
#               to 64 KiB + 1, sources 0-12 bytes off 16, a 1 MiB ring that wraps, the
#               buffers overwritten after every replay: every record equals its step's
#               producer output; refused host copy, gathers and wait void the launch
#               whole (examples/gpu_record.cu)
#   record_daemon_proof  issue #24 through toggled: the example engine connected to a
#               toggled, `togglectl record SPEC --steps N -o DIR` (plans turning SPEC's
#               hooks off at some steps), DIR read with graphtoggle.recording.open:
#               every record equals its step's and hook's monitor buffer, none for a
#               hook its step did not enable, none lost, the replays exact, lazy and
#               device (python/tests/gpu/record_daemon_proof.py).  toggled and togglectl
#               come from scripts/bench-daemon-bundle.sh's bundle (.gpu/benchd: the
#               machine has no -dev packages; carry it), else $TOGGLED/$TOGGLECTL,
#               else build/; SKIPPED without them
#   piecewise_proof, piecewise_proof_standin  issue #23: torch.compile with
#               graphtoggle.piecewise (split at the attention op, inductor pieces,
#               per size every piece captured into one pool, FULL graphs, eager
#               sizes), lazy and device, producers through attach() and through a
#               stand-in op (python/tests/gpu/piecewise_proof.py)
#   torch_piecewise_lazy, torch_piecewise_device  examples/torch_piecewise.py
#   piecewise_bench  issue #23's piecewise target: GPU time all off / all on
#               against the same piecewise graphs without graphtoggle, host time
#               per step added by step() and the guarded replays (~60 s)
#   torch_decode_bench  only with TORCH_DECODE_BENCH=1: issue #14's PyTorch
#               target, a bf16 LLM-shaped decode step: floor, producers off
#               (disabled nodes), off through the producer-free exec
#               (random_ops=False), all on (python/tests/gpu/torch_decode_bench.py;
#               ~12 GiB of GPU memory, ~30-60 s)
#   torch_compile_bench  only with TORCH_COMPILE_BENCH=1: issue #23's targets, the
#               op under torch.compile (modes a and c) against the same compiled model
#               without graphtoggle and against a stand-in whose hooks call an op that
#               does nothing (the hooks' placement apart), and the op's eager cost
#               (python/tests/gpu/torch_compile_bench.py; ~30-90 s)
#   llama_bench  only with LLAMA_BENCH=1: issues #23 and #31 on transformers' Llama
#               (16 layers, hidden 2048, bf16, random weights from a config), graphs
#               per batch size (32, 8, 1) in one pool, eager and torch.compile
#               (fullgraph) forwards, and with --kinds trees CUDA Graph Trees
#               (reduce-overhead, no KV cache), lazy and device mode: all off / all on
#               against the same graphs without graphtoggle
#               (python/tests/gpu/llama_bench.py; needs transformers, skips without it;
#               ~2-4 min)
#   record_bench  only with RECORD_BENCH=1: issue #24's targets, 32 hooks of 128 KiB a
#               step recorded at the example engine's full rate: step time against the
#               producers on and nothing recorded, bytes/s to disk and to a Python
#               subscriber against a pinned D2H copy (bench/record_bench.py; ~1-2 min;
#               the bundle as for record_daemon_proof, and graphtoggle.client's
#               toggle_pb2.py carried for the subscriber)
# Needs only libc, pthreads and CUDA (no libuv, protobuf-c or Check); the
# Python legs need a python3 with torch (they print SKIPPED without torch or
# a GPU) and use $B/libtoggle.so and the package in python/.
# Skips cleanly (exit 0) when nvcc is missing; each program skips when there
# is no CUDA device.  Every leg runs even when an earlier one failed; one
# "gpu-check: leg <name>: PASS|FAIL" line per leg at the end, and the exit
# status is 1 if any leg failed (or did not build).
#
# Usage: scripts/gpu-check.sh [gpu_check args, e.g. --steps N --seed N]
# Environment: GPU_REGION_ARGS (e.g. "--steps 500") for gpu_region,
# GPU_RECORD_ARGS (e.g. "--steps 2000") for gpu_record,
# TORCH_PROOF_ARGS (e.g. "--steps 10000 --bench") for torch_proof, PYTHON,
# TORCH_COMPILE_PROOF_ARGS (e.g. "--modes lazy --steps 2000") for torch_compile_proof,
# TORCH_DECODE_BENCH=1 (and TORCH_DECODE_BENCH_ARGS, e.g. "--batches 1,4,8"),
# TORCH_COMPILE_BENCH=1 (and TORCH_COMPILE_BENCH_ARGS, e.g. "--batches 1,8 --modes lazy"),
# PIECEWISE_PROOF_ARGS (e.g. "--steps 2000"), PIECEWISE_BENCH_ARGS (e.g. "--reps 11"),
# RECORD_PROOF_ARGS (e.g. "--steps 2000 --modes lazy"),
# RECORD_DAEMON_PROOF_ARGS (e.g. "--record-steps 1000 --modes lazy"),
# LLAMA_BENCH=1 (and LLAMA_BENCH_ARGS, e.g. "--modes device --kinds eager"),
# RECORD_BENCH=1 (and RECORD_BENCH_ARGS, e.g. "--rounds 7 --block-seconds 6").
# Environment: CUDA_HOME (default /usr/local/cuda), CC (default cc), NVCC.
# GPU_LEGS="gpu_check torch_proof ..." runs only the legs named (the rest are
# not listed); unset, every leg runs.  The device's 10-minute limit per call is
# why: the whole suite with the benches can take longer.
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
# leg_selected NAME: 0 if GPU_LEGS is unset or names NAME.
leg_selected() {
	[ -z "${GPU_LEGS:-}" ] && return 0
	case " $GPU_LEGS " in *" $1 "*) return 0 ;; esac
	return 1
}
# run_leg NAME ARGS...: build and run one program (output shown as it
# comes), note PASS, SKIPPED (no device: exit 0) or FAIL.
run_leg() {
	name=$1
	shift
	leg_selected "$name" || return 0
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

# run_py_leg NAME SCRIPT ARGS...: a Python leg, noted like run_leg's.
PYTHON=${PYTHON:-python3}
run_py_leg() {
	name=$1
	shift
	leg_selected "$name" || return 0
	verdict=FAIL
	if command -v "$PYTHON" >/dev/null 2>&1; then
		echo "gpu-check: running $*"
		rm -f "$B/$name.rc"
		{
			GRAPHTOGGLE_LIB="$PWD/$B/libtoggle.so" PYTHONUNBUFFERED=1 "$PYTHON" "$@"
			echo $? >"$B/$name.rc"
		} 2>&1 | tee "$B/$name.log"
		if [ "$(cat "$B/$name.rc" 2>/dev/null)" = 0 ]; then
			verdict=PASS
			grep -q ': SKIPPED' "$B/$name.log" && verdict=SKIPPED
		fi
	else
		echo "gpu-check: no $PYTHON for $name"
		verdict=SKIPPED
	fi
	[ "$verdict" = FAIL ] && status=1
	results="$results
gpu-check: leg $name: $verdict"
}

run_leg gpu_check "$@"
# shellcheck disable=SC2086 # GPU_REGION_ARGS is a list of words
run_leg gpu_region ${GPU_REGION_ARGS:-}
run_leg gpu_devtaint
run_leg gpu_devbare
run_leg gpu_devfull
run_leg gpu_guard
run_leg gpu_lifetime
run_leg gpu_bare
# shellcheck disable=SC2086 # TORCH_PROOF_ARGS is a list of words
run_py_leg torch_proof python/tests/gpu/torch_proof.py ${TORCH_PROOF_ARGS:-}
# shellcheck disable=SC2086 # TORCH_COMPILE_PROOF_ARGS is a list of words
run_py_leg torch_compile_proof python/tests/gpu/torch_compile_proof.py \
	${TORCH_COMPILE_PROOF_ARGS:-}
# the same with a dynamic token count (vLLM compiles one graph for every size)
run_py_leg torch_compile_proof_dynamic python/tests/gpu/torch_compile_proof.py --dynamic
# a graph keeps the monitor buffers its producers write (detach() while it lives)
run_py_leg buffer_lifetime python/tests/gpu/buffer_lifetime_proof.py
# the example engine standalone (nn.Module forward-hook producers, graphs per batch size
# captured by its own code under the patch), every replay checked
for mode in lazy device; do
	run_py_leg torch_engine_$mode examples/torch_engine.py --mode $mode --steps 3000 \
		--check-every 1 --change-every 100
done

# issue #24: the recorder (the agent side): staged, in C; then on the example engine
# shellcheck disable=SC2086 # GPU_RECORD_ARGS is a list of words
run_leg gpu_record ${GPU_RECORD_ARGS:-}
# shellcheck disable=SC2086 # RECORD_PROOF_ARGS is a list of words
run_py_leg record_proof python/tests/gpu/record_proof.py ${RECORD_PROOF_ARGS:-}
# and the whole path through toggled and togglectl record (the bundle's binaries)
# shellcheck disable=SC2086 # RECORD_DAEMON_PROOF_ARGS is a list of words
run_py_leg record_daemon_proof python/tests/gpu/record_daemon_proof.py --engine cuda \
	${RECORD_DAEMON_PROOF_ARGS:-}

# issue #23: graphtoggle under torch.compile, piecewise (graphtoggle.piecewise)
# shellcheck disable=SC2086 # PIECEWISE_PROOF_ARGS is a list of words
run_py_leg piecewise_proof python/tests/gpu/piecewise_proof.py ${PIECEWISE_PROOF_ARGS:-}
run_py_leg piecewise_proof_standin python/tests/gpu/piecewise_proof.py --producers standin
for mode in lazy device; do
	run_py_leg torch_piecewise_$mode examples/torch_piecewise.py --mode $mode --steps 1000
done
# shellcheck disable=SC2086 # PIECEWISE_BENCH_ARGS is a list of words
run_py_leg piecewise_bench python/tests/gpu/piecewise_bench.py ${PIECEWISE_BENCH_ARGS:-}

if [ "${TORCH_DECODE_BENCH:-0}" = 1 ]; then
	# shellcheck disable=SC2086 # TORCH_DECODE_BENCH_ARGS is a list of words
	run_py_leg torch_decode_bench python/tests/gpu/torch_decode_bench.py \
		${TORCH_DECODE_BENCH_ARGS:-}
fi

if [ "${RECORD_BENCH:-0}" = 1 ]; then
	# shellcheck disable=SC2086 # RECORD_BENCH_ARGS is a list of words
	run_py_leg record_bench bench/record_bench.py ${RECORD_BENCH_ARGS:-}
fi

if [ "${TORCH_COMPILE_BENCH:-0}" = 1 ]; then
	# shellcheck disable=SC2086 # TORCH_COMPILE_BENCH_ARGS is a list of words
	run_py_leg torch_compile_bench python/tests/gpu/torch_compile_bench.py \
		${TORCH_COMPILE_BENCH_ARGS:-}
fi

if [ "${LLAMA_BENCH:-0}" = 1 ]; then
	# shellcheck disable=SC2086 # LLAMA_BENCH_ARGS is a list of words
	run_py_leg llama_bench python/tests/gpu/llama_bench.py ${LLAMA_BENCH_ARGS:-}
fi

printf '%s\n' "$results" | sed '/^$/d'
# the producer-free exec's figures again, for pasting
grep -h '^gpu-bare: figures:' "$B/gpu_bare.log" 2>/dev/null || true
grep -h '^gpu-record: leg=' "$B/gpu_record.log" 2>/dev/null || true
grep -h '^record-proof: \[' "$B/record_proof.log" 2>/dev/null || true
grep -h '^record-daemon-proof: \[' "$B/record_daemon_proof.log" 2>/dev/null || true
grep -h '^piecewise-bench: table:' "$B/piecewise_bench.log" 2>/dev/null || true
# and the lifetime leg's reuse counts (issue #28)
grep -h '^gpu-lifetime: leg=stranger' "$B/gpu_lifetime.log" 2>/dev/null || true
[ "${TORCH_DECODE_BENCH:-0}" = 1 ] &&
	grep -h '^torch-decode-bench: table:' "$B/torch_decode_bench.log" 2>/dev/null || true
[ "${RECORD_BENCH:-0}" = 1 ] &&
	grep -h '^record-bench: ' "$B/record_bench.log" 2>/dev/null || true
[ "${LLAMA_BENCH:-0}" = 1 ] &&
	grep -h '^llama-bench: table:' "$B/llama_bench.log" 2>/dev/null || true
[ "${TORCH_COMPILE_BENCH:-0}" = 1 ] &&
	grep -h '^torch-compile-bench: table:' "$B/torch_compile_bench.log" 2>/dev/null || true
if [ "$status" -eq 0 ]; then
	echo "gpu-check: no leg failed"
else
	echo "gpu-check: FAIL (a leg failed: see above)"
fi
exit "$status"
