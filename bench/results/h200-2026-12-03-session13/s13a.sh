#!/bin/bash
# session 13, call 1: the whole default suite on b441e63
cd "$(dirname "$0")/../.."
t0=$(date +%s)
timeout 560 scripts/gpu-check.sh > "$OUT/gpu-check-4.txt" 2>&1
echo "rc=$? after $(( $(date +%s) - t0 )) s" >> "$OUT/gpu-check-4.txt"
grep -E 'gpu-check: leg|figures half|figures lazy graph|gpu-bare: pipelined|PASS \(|FAIL|mismatch|rc=' "$OUT/gpu-check-4.txt" | tail -40
