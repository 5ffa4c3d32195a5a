#!/bin/sh
# session 24, second call: device mode's targets of modes a and c (llama_bench compiled and
# trees), piecewise_bench (mode b), then guards.py on the GPU in the time left
cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$(date +%s)
LLAMA_BENCH=1 LLAMA_BENCH_ARGS="--kinds trees,compiled --modes device --batches 8,1 --reps 5" \
	GPU_LEGS="llama_bench" timeout 300 scripts/gpu-check.sh > "$OUT/llama-device.txt" 2>&1
echo "llama: rc=$? at $(( $(date +%s) - T0 )) s"
cat build/gpu/llama_bench.log >> "$OUT/llama-device.txt" 2>/dev/null
grep "table:\|execs:\|PASS\|FAIL" "$OUT/llama-device.txt" | sort -u
GPU_LEGS="piecewise_bench" timeout 120 scripts/gpu-check.sh > "$OUT/piecewise.txt" 2>&1
echo "piecewise: rc=$? at $(( $(date +%s) - T0 )) s"
cat build/gpu/piecewise_bench.log >> "$OUT/piecewise.txt" 2>/dev/null
grep "table:\|PASS\|FAIL" "$OUT/piecewise.txt" | sort -u
GRAPHTOGGLE_LIB=$PWD/build/gpu/libtoggle.so timeout $(( 585 - ($(date +%s) - T0) )) \
	python3 bench/results/h100-2026-12-07-session23/guards.py cuda 2048 null > "$OUT/guards-cuda.txt" 2>&1
echo "guards: rc=$? at $(( $(date +%s) - T0 )) s"
tail -30 "$OUT/guards-cuda.txt"
