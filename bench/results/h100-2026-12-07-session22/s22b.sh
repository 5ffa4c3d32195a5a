#!/bin/sh
# session 22: gpu_bare with its corrected set-exec count, then issue 23's figures on the H200 with main's
# all-on set exec: a side-stream experiment (plain torch), llama_bench (lazy and device, kinds compiled and trees, bs 32 / 8 / 1) and torch_compile_bench
cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$(date +%s)
GPU_LEGS="gpu_bare" timeout 90 scripts/gpu-check.sh > "$OUT/gpu-bare.txt" 2>&1
echo "gpu_bare: rc=$? at $(( $(date +%s) - T0 )) s"
cat build/gpu/gpu_bare.log >> "$OUT/gpu-bare.txt" 2>/dev/null
grep "pipelined\|FAIL\|PASS" "$OUT/gpu-bare.txt" | sort -u
# the side-stream experiment (plain torch, no graphtoggle), if time is left
[ -f bench/results/h100-2026-12-07-session22/side2.py ] && timeout 100 python3 bench/results/h100-2026-12-07-session22/side2.py 11 > "$OUT/side2.txt" 2>&1
echo "side2: rc=$? at $(( $(date +%s) - T0 )) s"; grep "side2:\|bs " "$OUT/side2.txt" | tail -8
LLAMA_BENCH=1 LLAMA_BENCH_ARGS="--kinds compiled,trees --reps 7" GPU_LEGS="llama_bench" \
	timeout 330 scripts/gpu-check.sh > "$OUT/llama.txt" 2>&1
echo "llama: rc=$? at $(( $(date +%s) - T0 )) s"
cat build/gpu/llama_bench.log >> "$OUT/llama.txt" 2>/dev/null
grep "table:\|set exec\|PASS\|FAIL" "$OUT/llama.txt" | sort -u
TORCH_COMPILE_BENCH=1 TORCH_COMPILE_BENCH_ARGS="--reps 9" GPU_LEGS="torch_compile_bench" \
	timeout $(( 585 - ($(date +%s) - T0) )) scripts/gpu-check.sh > "$OUT/tcb.txt" 2>&1
echo "tcb: rc=$? at $(( $(date +%s) - T0 )) s"
cat build/gpu/torch_compile_bench.log >> "$OUT/tcb.txt" 2>/dev/null
grep "table:\|PASS\|FAIL" "$OUT/tcb.txt" | sort -u
