#!/bin/bash
# session 13, final: on f1bf859, the legs this session's code touches (the set exec's
# ring: gpu_check's eager phase, gpu_bare's held sets, gpu_devfull; the op's capture path:
# torch_compile_proof, buffer_lifetime), the budget being short for the whole suite
cd "$(dirname "$0")/../.."
t0=$(date +%s)
GPU_LEGS="gpu_check gpu_bare gpu_devfull buffer_lifetime torch_compile_proof" timeout 400 \
	scripts/gpu-check.sh > "$OUT/gpu-check-2.txt" 2>&1
echo "rc=$? after $(( $(date +%s) - t0 )) s" >> "$OUT/gpu-check-2.txt"
grep -E 'gpu-check: leg|figures half|figures lazy graph|gpu-bare: pipelined|buffer-lifetime: (lazy|device)|phase=eager|FAIL|rc=' "$OUT/gpu-check-2.txt" | cut -c1-400 | tail -40
