#!/bin/sh
# session 23: where trees' host time goes on the GPU machine (cProfile of 300 floor and 300 hooked all-off calls)
cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$(date +%s)
LLAMA_BENCH=1 LLAMA_BENCH_ARGS="--kinds trees --modes lazy --batches 8,1 --reps 3 --profile-trees" \
	GPU_LEGS="llama_bench" timeout 240 scripts/gpu-check.sh > "$OUT/llama-prof.txt" 2>&1
echo "llama: rc=$? at $(( $(date +%s) - T0 )) s"
cat build/gpu/llama_bench.log >> "$OUT/llama-prof.txt" 2>/dev/null
grep "table:\|PASS\|FAIL" "$OUT/llama-prof.txt" | sort -u
