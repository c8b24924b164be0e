#!/usr/bin/env bash
# Issue 37: the traced-run check of the GPU suite (scripts/gpu-trace-check.sh), then the
# bench (benchmarks/2026-12-04-h200x1-in-turn.txt). Beside the built binary, as run.sh:
#
#   mkdir -p gpu && cp target/release/haloscope gpu/
#   cp scripts/kernels-h200/trace-and-bench.sh scripts/gpu-trace-check.sh gpu/ && bash gpu/trace-and-bench.sh
set -uo pipefail
cd "$(dirname "$0")"
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
out=${OUT:-/tmp}
bash ./gpu-trace-check.sh ./haloscope 0,0
./haloscope bench --runtime cuda --gpus 0 --seconds 0.1 > "$out/bench.txt" 2> "$out/bench.err"
sed -n '/== fused modes by/,$p' "$out/bench.txt"
