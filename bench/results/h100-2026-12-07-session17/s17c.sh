#!/bin/sh
# session 16: the torch legs on this head (the capture-refusal commits of session 15 were not GPU-run)
cd "$(dirname "$0")/../.."
GPU_LEGS="${LEGS:-torch_proof buffer_lifetime torch_engine_lazy torch_engine_device torch_compile_proof piecewise_proof}" \
	scripts/gpu-check.sh > "$OUT/gpu-torch-legs.txt" 2>&1
rc=$?
for f in build/gpu/*.log; do echo "=== $f"; cat "$f"; done > "$OUT/gpu-torch-legs-logs.txt" 2>/dev/null
grep "gpu-check: \|PASS\|FAIL" "$OUT/gpu-torch-legs.txt" | tail -30
exit $rc
