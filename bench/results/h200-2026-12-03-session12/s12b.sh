#!/bin/bash
# session 12, call 2: llama_bench with a half-on leg, with and without the full exec
cd "$(dirname "$0")/../.."
GPU_LEGS=none scripts/gpu-check.sh > "$OUT/build.txt" 2>&1
export PYTHONPATH=$PWD/python GRAPHTOGGLE_LIB=$PWD/build/gpu/libtoggle.so
t0=$(date +%s)
timeout 280 python3 python/tests/gpu/llama_bench.py --modes lazy --kinds compiled --reps 9 --half \
	> "$OUT/llama-half-full.txt" 2>&1
echo "rc=$? after $(( $(date +%s) - t0 )) s" >> "$OUT/llama-half-full.txt"
t0=$(date +%s)
timeout 260 python3 python/tests/gpu/llama_bench.py --modes lazy --kinds compiled --reps 9 --half \
	--no-full-exec > "$OUT/llama-half-nofull.txt" 2>&1
echo "rc=$? after $(( $(date +%s) - t0 )) s" >> "$OUT/llama-half-nofull.txt"
grep -h -E 'table|execs|rc=|FAIL|PASS' "$OUT"/llama-half-*.txt
