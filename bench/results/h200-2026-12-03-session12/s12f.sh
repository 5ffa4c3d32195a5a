#!/bin/bash
# session 12, call 6: final main, the legs the set exec touches
cd "$(dirname "$0")/../.."
t0=$(date +%s)
GPU_LEGS="gpu_bare gpu_devfull gpu_check torch_compile_proof" timeout 150 scripts/gpu-check.sh \
	> "$OUT/gpu-check-3.txt" 2>&1
echo "rc=$? after $(( $(date +%s) - t0 )) s" >> "$OUT/gpu-check-3.txt"
grep -E 'gpu-check: leg|figures half|figures lazy graph|gpu-bare: pipelined|PASS \(|rc=' "$OUT/gpu-check-3.txt" | tail -20
