#!/bin/sh
# session 15 run 1: piecewise_bench's verdict on main
mkdir -p "$OUT"
GPU_LEGS="piecewise_bench" scripts/gpu-check.sh > "$OUT/gpu-pwbench.txt" 2>&1
echo "rc=$?" >> "$OUT/gpu-pwbench.txt"
cp build/gpu/piecewise_bench.log "$OUT/" 2>/dev/null
grep -E "leg |PASS|FAIL|rc=|table|verdict" "$OUT/gpu-pwbench.txt" | tail -40
