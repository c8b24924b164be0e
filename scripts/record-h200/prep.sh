#!/usr/bin/env bash
# Prepares gpu/ (git-ignored) for scripts/record-h200/run.sh: haloscope (built here: the
# recorder needs no CUDA to build), the seed programs, the injection library's source (the
# memory figure runs it without haloscope's parent), every non-NCCL mode exported for pulse
# on 4 devices of GPU 0 (64 steps; a few in 2D, radiate) and, when given, a fetched copy of NVIDIA's
# multi-gpu-programming-models (its single_gpu/jacobi.cu and multi-threaded variants, never
# kept in this repository).
# usage: scripts/record-h200/prep.sh [PATH-TO-multi-gpu-programming-models-git-dir]
set -euo pipefail
H=${H:-target/release/haloscope}
rm -rf gpu && mkdir -p gpu/exports
cp "$H" gpu/haloscope
cp tests/cuda/seed.cu tests/cuda/seed-fixed.cu tests/cuda/graph-once.cu tests/cuda/graph-once.access.txt \
   tests/cuda/pitched.cu tests/cuda/pitched.access.txt tests/cuda/student.cu tests/cuda/footprint.cu \
   inject/haloscope_inject.c inject/host_sync.c scripts/record-h200/run.sh scripts/record-h200/host-sync.sh scripts/record-h200/footprints.sh scripts/record-h200/mt-build.sh scripts/record-h200/fp-lib.sh scripts/record-h200/unpatch.sh scripts/record-h200/long.sh gpu/
# The recorder's call codes, as build.rs wrote them for the binary above.
cp "$(ls -t target/release/build/haloscope-*/out/schema.h | head -1)" gpu/
if [ -n "${1:-}" ]; then
  mkdir -p gpu/jacobi && git --git-dir "$1" show HEAD:single_gpu/jacobi.cu > gpu/jacobi/jacobi.cu
  # The multi-threaded variants (one OpenMP thread a GPU), for host-sync.sh to run with
  # several threads on one GPU.
  for v in multi_threaded_copy multi_threaded_copy_overlap multi_threaded_p2p multi_threaded_p2p_opt; do
    mkdir -p gpu/mt/$v && git --git-dir "$1" show HEAD:$v/jacobi.cu > gpu/mt/$v/jacobi.cu
  done
fi
for m in events host-sync overlap push wide-halo graph graph-push graph-flags fused fused-push fused-flags \
         fused-overlap fused-p2p no-wait wait-before-record cross-device-record halo-overwrite write-after-read; do
  "$H" program export $m --cuda --out gpu/exports/$m --scenario pulse --gpus 0,0,0,0 --steps 64 2>/dev/null
done
# And in 2D (radiate's slabs of rows, on its devices of GPU 0), correct and broken.
for m in events fused fused-overlap fused-p2p no-wait; do
  "$H" program export $m --cuda --out gpu/exports/radiate-$m --scenario radiate --gpus 0,0,0,0 --steps 64 2>/dev/null
done
du -sh gpu
