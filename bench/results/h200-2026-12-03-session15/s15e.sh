#!/bin/sh
# session 15 run 5: the op's eager cost (torch_compile_bench --legs eager), this tree's
# package against fb62467's (.gpu/oldpy), interleaved, one libtoggle
mkdir -p "$OUT"
GPU_LEGS="none" scripts/gpu-check.sh > "$OUT/build.txt" 2>&1
export GRAPHTOGGLE_LIB="$PWD/build/gpu/libtoggle.so" PYTHONUNBUFFERED=1
for r in 1 2 3; do
	for which in old new; do
		if [ $which = old ]; then s=.gpu/oldpy/python/tests/gpu/torch_compile_bench.py; else s=python/tests/gpu/torch_compile_bench.py; fi
		echo "== round $r $which"
		python3 $s --legs eager 2>&1 | grep -v Warning | grep -E "eager|FAIL|Error" | head -12
	done
done > "$OUT/eager-cost.txt" 2>&1
cat "$OUT/eager-cost.txt" | head -90
