#!/bin/sh
# session 21: is lazy all on slower because the check's half step set nodes of the full exec? lazy, default against --fresh-execs (both execs rebuilt after the check), kind compiled, bs 8 / 1, interleaved
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$(date +%s)
run() { # $1 tag, $2 llama_bench args, $3 limit (the first builds and compiles cold)
	LLAMA_BENCH=1 LLAMA_BENCH_ARGS="--kinds compiled --reps 9 --batches 8,1 $2" GPU_LEGS="llama_bench" \
		timeout $3 scripts/gpu-check.sh > "$OUT/llama-$1.txt" 2>&1
	echo "$1: rc=$? at $(( $(date +%s) - T0 )) s"
	cat build/gpu/llama_bench.log >> "$OUT/llama-$1.txt" 2>/dev/null
	grep "table:\|execs\|PASS\|FAIL" "$OUT/llama-$1.txt" | sort -u
}
run lazy-a1 "--modes lazy" 170
run lazy-fresh-1 "--modes lazy --fresh-execs" 80
run lazy-a2 "--modes lazy" 80
run lazy-fresh-2 "--modes lazy --fresh-execs" 80
echo "s21b: took $(( $(date +%s) - T0 )) s"
