#!/bin/sh
# session 22: the whole default gpu-check suite on main (all-on set execs; gpu_bare all-on segments; narrowed stale-code rule)
cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$(date +%s)
timeout ${1:-420} scripts/gpu-check.sh > "$OUT/gpu-check-1.txt" 2>&1
echo "gpu-check: rc=$? at $(( $(date +%s) - T0 )) s"
grep "gpu-check: leg\|no leg failed\|FAIL\|SKIP" "$OUT/gpu-check-1.txt" | sort | uniq -c | sort -rn | head -60
cp build/gpu/*.log "$OUT/" 2>/dev/null
