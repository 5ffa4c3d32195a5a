#!/bin/sh
# session 15 run 4: leg c of torch_compile_proof under torch.compile(mode="max-autotune")
# and backend="cudagraphs" (CUDA Graph Trees without inductor), lazy and device
mkdir -p "$OUT"
for c in max-autotune cudagraphs; do
	GPU_LEGS="torch_compile_proof" TORCH_COMPILE_PROOF_ARGS="--legs c --c-compile $c" \
		timeout 250 scripts/gpu-check.sh > "$OUT/compile-c-$c.txt" 2>&1
	echo "rc=$?" >> "$OUT/compile-c-$c.txt"
	grep -E "gpu-check: leg |torch-compile-proof: |rc=" "$OUT/compile-c-$c.txt" | tail -8
	grep -E "Traceback|Error|skipping cudagraphs" "$OUT/compile-c-$c.txt" | head -6
done
