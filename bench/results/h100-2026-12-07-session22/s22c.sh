#!/bin/sh
# session 22: lazy and device mode in one process, kind trees, bs 8 / 1 (the call s22b left warm)
cd "$(dirname "$0")/../../.."
LLAMA_BENCH=1 LLAMA_BENCH_ARGS="--kinds trees --modes lazy,device --batches 8,1 --reps 5" GPU_LEGS="llama_bench" \
	timeout 225 scripts/gpu-check.sh > "$OUT/llama-trees-ld.txt" 2>&1
echo rc=$?
cat build/gpu/llama_bench.log >> "$OUT/llama-trees-ld.txt"
grep "floor\|execs\|PASS\|FAIL" "$OUT/llama-trees-ld.txt" | grep -v "differ" | sort -u
