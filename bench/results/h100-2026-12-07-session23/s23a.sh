#!/bin/sh
# for session 23 (written in session 22): on the H200, one call (~450-550 s): gpu_bare (its
# alternating pass and the new counts, never run on a GPU), then
# the Llama compiled, lazy, with --half (held half, alternating halves, and the new on-alt leg:
# all on alternating with half), with and without set execs, then torch_compile_bench's eager leg
# alone (the interleaved split of the dispatcher's cost)
cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$(date +%s)
GPU_LEGS="gpu_bare" timeout 90 scripts/gpu-check.sh > "$OUT/gpu-bare.txt" 2>&1
echo "gpu_bare: rc=$? at $(( $(date +%s) - T0 )) s"
cat build/gpu/gpu_bare.log >> "$OUT/gpu-bare.txt" 2>/dev/null
grep "pipelined\|alternating\|FAIL\|PASS" "$OUT/gpu-bare.txt" | sort -u
for v in default no-set-exec; do  # on-alt with the all-on exec, and without (the full exec)
	x=""; [ $v = no-set-exec ] && x="--no-set-exec"
	LLAMA_BENCH=1 LLAMA_BENCH_ARGS="--kinds compiled --modes lazy --batches 8,1 --half --reps 7 $x" \
		GPU_LEGS="llama_bench" timeout 200 scripts/gpu-check.sh > "$OUT/llama-half-$v.txt" 2>&1
	echo "llama $v: rc=$? at $(( $(date +%s) - T0 )) s"
	cat build/gpu/llama_bench.log >> "$OUT/llama-half-$v.txt" 2>/dev/null
	grep "table:\|execs:\|PASS\|FAIL" "$OUT/llama-half-$v.txt" | sort -u
done
TORCH_COMPILE_BENCH=1 TORCH_COMPILE_BENCH_ARGS="--legs eager" GPU_LEGS="torch_compile_bench" \
	timeout $(( 590 - ($(date +%s) - T0) )) scripts/gpu-check.sh > "$OUT/tcb-eager.txt" 2>&1
echo "tcb: rc=$? at $(( $(date +%s) - T0 )) s"
grep "table:\|PASS\|FAIL" "$OUT/tcb-eager.txt" | sort -u
