#!/bin/sh
# session 19, call 1: fdcad83's check_sets on a GPU: llama_bench trees+compiled, then torch_compile_bench a,c (MODES: lazy default)
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
git log --oneline -1
T0=$(date +%s)
LIM=${LIM_B:-330} sh .gpu/exp/s17b.sh
LIM=${LIM_A:-130} sh .gpu/exp/s17a.sh
echo "s19a: took $(( $(date +%s) - T0 )) s"
