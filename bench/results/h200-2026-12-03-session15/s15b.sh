#!/bin/sh
# session 15 run 2: the whole default GPU suite on the session's code (torch_compile_proof
# now with leg s)
mkdir -p "$OUT"
scripts/gpu-check.sh > "$OUT/gpu-check-1.txt" 2>&1
echo "rc=$?" >> "$OUT/gpu-check-1.txt"
grep -E "gpu-check: leg |torch-compile-proof: .* s:|rc=" "$OUT/gpu-check-1.txt" | tail -40
grep -E "FAIL|Traceback|Error" "$OUT/gpu-check-1.txt" | head -20
