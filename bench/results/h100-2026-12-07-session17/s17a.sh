#!/bin/sh
# session 17, call 1: torch_compile_bench modes a and c with the stand-in leg (lazy; MODES to change)
cd "$(dirname "$0")/../.."
T0=$(date +%s)
TORCH_COMPILE_BENCH=1 TORCH_COMPILE_BENCH_ARGS="--modes ${MODES:-lazy} --legs a,c --reps 11" GPU_LEGS="torch_compile_bench" \
	timeout ${LIM:-560} scripts/gpu-check.sh > "$OUT/gpu-tcb-standin-${MODES:-lazy}.txt" 2>&1
rc=$?
cat build/gpu/torch_compile_bench.log >> "$OUT/gpu-tcb-standin-${MODES:-lazy}.txt" 2>/dev/null
grep "table:\|PASS\|FAIL\|mismatch\|kernel nodes\|stand-in\|Error" "$OUT/gpu-tcb-standin-${MODES:-lazy}.txt" | tail -30
echo "s17a: rc=$rc took $(( $(date +%s) - T0 )) s"
exit $rc
