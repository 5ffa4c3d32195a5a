#!/bin/bash
# session 12, call 4: the whole default GPU suite with the set exec
cd "$(dirname "$0")/../.."
t0=$(date +%s)
timeout 565 scripts/gpu-check.sh > "$OUT/gpu-check-2.txt" 2>&1
echo "rc=$? after $(( $(date +%s) - t0 )) s" >> "$OUT/gpu-check-2.txt"
grep -E 'gpu-check: leg|figures half|figures lazy graph|gpu-bare: (steps|pipelined|FAIL|PASS)|mismatch|FAIL|rc=' "$OUT/gpu-check-2.txt" | grep -v 'mismatches=0\|0 mismatches' | tail -60
