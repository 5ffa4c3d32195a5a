#!/bin/sh
# session 24: the whole default gpu-check on main (53db6ad's one-int-cell hook, 30acefd and
# 34ee556 never ran on a GPU before), the logs in one tarball, then the all on / all off
# targets of modes a and c (llama_bench trees then compiled, lazy) in the time left of $1 s
# (default 588)
cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$(date +%s)
timeout $(( ${1:-588} < 430 ? ${1:-588} : 430 )) scripts/gpu-check.sh > "$OUT/gpu-check.txt" 2>&1
echo "gpu-check: rc=$? at $(( $(date +%s) - T0 )) s"
grep "gpu-check: leg\|no leg failed\|FAIL\|SKIP" "$OUT/gpu-check.txt" | sort | uniq -c | sort -rn | head -60
tar czf "$OUT/gpu-logs.tgz" build/gpu/*.log 2>/dev/null
LEFT=$(( ${1:-588} - ($(date +%s) - T0) ))
[ $LEFT -lt 90 ] && { echo "llama: skipped ($LEFT s left)"; exit 0; }
LLAMA_BENCH=1 LLAMA_BENCH_ARGS="--kinds trees,compiled --modes lazy --batches 8,1 --reps 5" \
	GPU_LEGS="llama_bench" timeout $LEFT scripts/gpu-check.sh > "$OUT/llama-lazy.txt" 2>&1
echo "llama: rc=$? at $(( $(date +%s) - T0 )) s"
cat build/gpu/llama_bench.log >> "$OUT/llama-lazy.txt" 2>/dev/null
grep "table:\|execs:\|PASS\|FAIL" "$OUT/llama-lazy.txt" | sort -u
