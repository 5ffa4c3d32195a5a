#!/bin/sh
# session 21: what keeps lazy all on behind device all on? lazy with torch.mul producers (the default),
# lazy with libtoggle's copy_out kernel, device mode: kind compiled, bs 8 / 1, interleaved in one call
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
run lazy-mul-1 "--modes lazy" 170
run lazy-copy-1 "--modes lazy --method copy_out" 80
run device-1 "--modes device" 80
run lazy-mul-2 "--modes lazy" 80
run lazy-copy-2 "--modes lazy --method copy_out" 80
run device-2 "--modes device" 80
echo "s21a: took $(( $(date +%s) - T0 )) s"
