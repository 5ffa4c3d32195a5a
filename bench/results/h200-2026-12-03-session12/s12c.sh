#!/bin/bash
# session 12, call 3: torch.profiler breakdown of the compiled Llama's all-on steps
cd "$(dirname "$0")/../.."
GPU_LEGS=none scripts/gpu-check.sh > "$OUT/build.txt" 2>&1
export PYTHONPATH=$PWD/python GRAPHTOGGLE_LIB=$PWD/build/gpu/libtoggle.so
for bs in 8 1; do
	BS=$bs timeout 200 python3 .gpu/exp/prof_llama.py > "$OUT/prof-bs$bs.txt" 2>&1
	echo "rc=$?" >> "$OUT/prof-bs$bs.txt"
done
BS=8 METHOD=copy_out timeout 150 python3 .gpu/exp/prof_llama.py > "$OUT/prof-bs8-copy_out.txt" 2>&1
echo "rc=$?" >> "$OUT/prof-bs8-copy_out.txt"
grep -h 'prof:\|rc=\|Error\|error' "$OUT"/prof-*.txt | cut -c1-400
