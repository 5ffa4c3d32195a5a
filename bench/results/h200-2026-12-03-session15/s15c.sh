#!/bin/sh
# session 15 run 3: torch_compile_proof (legs a, c, s; static and dynamic) after leg s's pool fix
mkdir -p "$OUT"
GPU_LEGS="torch_compile_proof torch_compile_proof_dynamic" scripts/gpu-check.sh > "$OUT/gpu-compile.txt" 2>&1
echo "rc=$?" >> "$OUT/gpu-compile.txt"
grep -E "gpu-check: leg |torch-compile-proof: |rc=" "$OUT/gpu-compile.txt" | grep -v UserWarning | tail -30
grep -E "Traceback|Error" "$OUT/gpu-compile.txt" | head -10
