#!/bin/sh
# session 19 (not run: no device time left): host modes' second execs assembled (llama_bench --assemble-execs) against cloned (the default), lazy, kind compiled, interleaved
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$(date +%s)
run() { # $1 tag, $2 extra llama_bench args, $3 limit (the first builds and compiles cold)
	LLAMA_BENCH=1 LLAMA_BENCH_ARGS="--modes lazy --kinds compiled --reps 9 $2" GPU_LEGS="llama_bench" \
		timeout $3 scripts/gpu-check.sh > "$OUT/llama-$1.txt" 2>&1
	echo "$1: rc=$? at $(( $(date +%s) - T0 )) s"
	cat build/gpu/llama_bench.log >> "$OUT/llama-$1.txt" 2>/dev/null
	grep "table:\|execs" "$OUT/llama-$1.txt" | sort -u
}
run compiled-assemble-1 --assemble-execs 200
run compiled-clone-1 "" 100
run compiled-assemble-2 --assemble-execs 100
run compiled-clone-2 "" 100
echo "s19c: took $(( $(date +%s) - T0 )) s"
