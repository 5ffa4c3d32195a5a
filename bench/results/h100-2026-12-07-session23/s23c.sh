#!/bin/sh
# session 23: issue 23's timing targets in one call: llama_bench (modes a and c: kinds compiled and
# trees, lazy and device, bs 8 / 1), piecewise_bench (mode b), then torch_compile_bench's eager leg
# (the per-op-call target) with the time left
cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$(date +%s)
LLAMA_BENCH=1 LLAMA_BENCH_ARGS="--kinds compiled,trees --modes lazy,device --batches 8,1 --reps 5" \
	GPU_LEGS="llama_bench" timeout 390 scripts/gpu-check.sh > "$OUT/llama.txt" 2>&1
echo "llama: rc=$? at $(( $(date +%s) - T0 )) s"
cat build/gpu/llama_bench.log >> "$OUT/llama.txt" 2>/dev/null
grep "table:\|execs:\|PASS\|FAIL" "$OUT/llama.txt" | sort -u
GPU_LEGS="piecewise_bench" timeout 120 scripts/gpu-check.sh > "$OUT/piecewise.txt" 2>&1
echo "piecewise: rc=$? at $(( $(date +%s) - T0 )) s"
cat build/gpu/piecewise_bench.log >> "$OUT/piecewise.txt" 2>/dev/null
grep "table:\|PASS\|FAIL" "$OUT/piecewise.txt" | sort -u
TORCH_COMPILE_BENCH=1 TORCH_COMPILE_BENCH_ARGS="--legs eager" GPU_LEGS="torch_compile_bench" \
	timeout $(( 592 - ($(date +%s) - T0) )) scripts/gpu-check.sh > "$OUT/tcb-eager.txt" 2>&1
echo "tcb: rc=$? at $(( $(date +%s) - T0 )) s"
grep "table:\|PASS\|FAIL" "$OUT/tcb-eager.txt" | sort -u
