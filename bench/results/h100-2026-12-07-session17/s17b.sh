#!/bin/sh
# session 17, call 2: llama_bench kinds trees and compiled (lazy; MODES to change)
cd "$(dirname "$0")/../.."
T0=$(date +%s)
LLAMA_BENCH=1 LLAMA_BENCH_ARGS="--modes ${MODES:-lazy} --kinds ${KINDS:-trees,compiled} --reps 9" GPU_LEGS="llama_bench" \
	timeout ${LIM:-560} scripts/gpu-check.sh > "$OUT/gpu-llama-${MODES:-lazy}.txt" 2>&1
rc=$?
cat build/gpu/llama_bench.log >> "$OUT/gpu-llama-${MODES:-lazy}.txt" 2>/dev/null
grep -v "^\s*$" "$OUT/gpu-llama-${MODES:-lazy}.txt" | grep -i "table\|PASS\|FAIL\|mismatch\|Error\|trees" | tail -40
echo "s17b: rc=$rc took $(( $(date +%s) - T0 )) s"
exit $rc
