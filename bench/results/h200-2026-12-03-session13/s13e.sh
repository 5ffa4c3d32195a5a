#!/bin/bash
# session 13, final (2): on f1bf859, every other leg of the default suite
cd "$(dirname "$0")/../.."
t0=$(date +%s)
GPU_LEGS="gpu_region gpu_devtaint gpu_devbare gpu_guard gpu_lifetime torch_proof torch_compile_proof_dynamic torch_engine_lazy torch_engine_device gpu_record record_proof record_daemon_proof piecewise_proof piecewise_proof_standin torch_piecewise_lazy torch_piecewise_device piecewise_bench" \
	timeout 320 scripts/gpu-check.sh > "$OUT/gpu-check-3.txt" 2>&1
echo "rc=$? after $(( $(date +%s) - t0 )) s" >> "$OUT/gpu-check-3.txt"
grep -E 'gpu-check: leg|FAIL|rc=' "$OUT/gpu-check-3.txt" | cut -c1-300 | tail -30
