#!/bin/bash
# session 12, call 5: llama_bench, half the hooks held (set exec) and alternating (full exec)
cd "$(dirname "$0")/../.."
GPU_LEGS=none scripts/gpu-check.sh > "$OUT/build.txt" 2>&1
export PYTHONPATH=$PWD/python GRAPHTOGGLE_LIB=$PWD/build/gpu/libtoggle.so
t0=$(date +%s)
timeout 400 python3 python/tests/gpu/llama_bench.py --modes lazy --kinds compiled --reps 9 --half \
	> "$OUT/llama-setx.txt" 2>&1
echo "rc=$? after $(( $(date +%s) - t0 )) s" >> "$OUT/llama-setx.txt"
grep -h -E 'table|execs|rc=|FAIL|PASS|ms/step' "$OUT"/llama-setx.txt
