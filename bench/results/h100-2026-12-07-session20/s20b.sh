#!/bin/sh
# session 20 experiment (temporary bare.c patch, never committed): lazy, the assembled full exec's producers plain (no launch attributes copied, as device mode's) vs copied
cd "$(dirname "$0")/../.."
T0=$(date +%s)
run() {
	env $2 LLAMA_BENCH=1 LLAMA_BENCH_ARGS="--modes lazy --kinds compiled --reps 9 --batches 8,1" GPU_LEGS="llama_bench" \
		timeout $3 scripts/gpu-check.sh > "$OUT/llama-$1.txt" 2>&1
	echo "$1: rc=$? at $(( $(date +%s) - T0 )) s"
	cat build/gpu/llama_bench.log >> "$OUT/llama-$1.txt" 2>/dev/null
	grep "table:\|execs assembled\|PASS\|FAIL" "$OUT/llama-$1.txt" | sort -u
}
run plain-1 TG_EXP_PLAIN=1 150
run copied-1 TG_EXP_X=0 70
run plain-2 TG_EXP_PLAIN=1 70
