#!/bin/bash
# session 13, call 2: the buffer-lifetime leg
cd "$(dirname "$0")/../.."
GPU_LEGS="buffer_lifetime" timeout 200 scripts/gpu-check.sh > "$OUT/buffer-lifetime.txt" 2>&1
echo "rc=$?" >> "$OUT/buffer-lifetime.txt"
grep -E 'buffer-lifetime|gpu-check: leg|rc=|Error|error' "$OUT/buffer-lifetime.txt" | tail -20
