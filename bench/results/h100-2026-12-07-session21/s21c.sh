#!/bin/sh
# session 21: all on gets a set exec once a set in between ran on the full exec (the default now) against --no-set-exec (all on on the full exec the check set nodes of), lazy, kind compiled, bs 8 / 1, interleaved
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$(date +%s)
run() { # $1 tag, $2 llama_bench args, $3 limit (the first builds and compiles cold)
	LLAMA_BENCH=1 LLAMA_BENCH_ARGS="--kinds compiled --reps 7 --batches 8,1 $2" GPU_LEGS="llama_bench" \
		timeout $3 scripts/gpu-check.sh > "$OUT/llama-$1.txt" 2>&1
	echo "$1: rc=$? at $(( $(date +%s) - T0 )) s"
	cat build/gpu/llama_bench.log >> "$OUT/llama-$1.txt" 2>/dev/null
	grep "table:\|execs\|PASS\|FAIL" "$OUT/llama-$1.txt" | sort -u
}
run lazy-new-1 "--modes lazy" 150
run lazy-noset-1 "--modes lazy --no-set-exec" 70
run lazy-new-2 "--modes lazy" 70
run lazy-noset-2 "--modes lazy --no-set-exec" 70
echo "s21c: took $(( $(date +%s) - T0 )) s"
