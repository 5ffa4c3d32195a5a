#!/bin/sh
# session 24, for what device time was left after refused starts: gpu-check's Python legs
# only (the hook changes since the last GPU run are all in the package; the C legs last
# passed on 5f939a1 and libtoggle has not changed since), then llama_bench's trees target
# (mode c, lazy) in the time left of $1 s (default 588)
cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$(date +%s)
GPU_LEGS="torch_proof torch_compile_proof torch_compile_proof_dynamic buffer_lifetime torch_engine_lazy torch_engine_device record_proof piecewise_proof piecewise_proof_standin torch_piecewise_lazy torch_piecewise_device" \
	timeout 330 scripts/gpu-check.sh > "$OUT/gpu-check-py.txt" 2>&1
echo "gpu-check: rc=$? at $(( $(date +%s) - T0 )) s"
grep "gpu-check: leg\|no leg failed\|FAIL\|SKIP" "$OUT/gpu-check-py.txt" | sort | uniq -c | sort -rn | head -40
tar czf "$OUT/gpu-logs.tgz" build/gpu/*.log 2>/dev/null
LEFT=$(( ${1:-588} - ($(date +%s) - T0) ))
[ $LEFT -lt 90 ] && { echo "llama: skipped ($LEFT s left)"; exit 0; }
LLAMA_BENCH=1 LLAMA_BENCH_ARGS="--kinds trees --modes lazy --batches 8,1 --reps 5" \
	GPU_LEGS="llama_bench" timeout $LEFT scripts/gpu-check.sh > "$OUT/llama-trees.txt" 2>&1
echo "llama: rc=$? at $(( $(date +%s) - T0 )) s"
cat build/gpu/llama_bench.log >> "$OUT/llama-trees.txt" 2>/dev/null
grep "bs [18]: off\|execs:\|PASS\|FAIL" "$OUT/llama-trees.txt" | sort -u
