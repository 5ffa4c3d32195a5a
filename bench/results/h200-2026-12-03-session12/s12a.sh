#!/bin/bash
# session 12, call 1: the whole default GPU suite on main + the full exec for sets in between
cd "$(dirname "$0")/../.."
t0=$(date +%s)
timeout 565 scripts/gpu-check.sh > "$OUT/gpu-check-1.txt" 2>&1
echo "rc=$? after $(( $(date +%s) - t0 )) s" >> "$OUT/gpu-check-1.txt"
grep -E 'gpu-check: leg|figures half|figures all|gpu-bare: (steps|FAIL|PASS)|mismatch|FAIL|rc=' "$OUT/gpu-check-1.txt" | tail -60
