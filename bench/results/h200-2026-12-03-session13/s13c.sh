#!/bin/bash
# session 13, call 3: torch.compile with a dynamic token count (modes a, c, d; lazy, device)
cd "$(dirname "$0")/../.."
GPU_LEGS="torch_compile_proof_dynamic" timeout 400 scripts/gpu-check.sh > "$OUT/compile-dynamic.txt" 2>&1
echo "rc=$?" >> "$OUT/compile-dynamic.txt"
grep -E 'torch-compile-proof|gpu-check: leg|rc=|Error|error' "$OUT/compile-dynamic.txt" | tail -30
python3 .gpu/exp/copy_nodes.py 9 > "$OUT/copy-nodes.txt" 2>&1
echo "rc=$?" >> "$OUT/copy-nodes.txt"
cat "$OUT/copy-nodes.txt" | tail -20
