#!/bin/sh
# session 23 (written in session 22): the whole default gpu-check suite on main (the all-on exec in its own slot; gpu_bare alternating)
cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$(date +%s)
timeout ${1:-420} scripts/gpu-check.sh > "$OUT/gpu-check-1.txt" 2>&1
echo "gpu-check: rc=$? at $(( $(date +%s) - T0 )) s"
grep "gpu-check: leg\|no leg failed\|FAIL\|SKIP" "$OUT/gpu-check-1.txt" | sort | uniq -c | sort -rn | head -60
tar czf "$OUT/gpu-logs.tgz" build/gpu/*.log 2>/dev/null  # one file: at most 8 come back
