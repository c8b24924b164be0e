#!/usr/bin/env bash
# The 2D side-by-side: NVIDIA/multi-gpu-programming-models' Jacobi beside haloscope's 2D
# bench, at the same grid sizes, float in both, in one device session. Their source is
# never part of haloscope: pass a copy of its public repository (or of the variants'
# folders) as SRC; this builds the copies in place with the machine's nvcc (13.0 needs
# -arch sm_90 -std=c++17) and runs each variant with the per-iteration norm check off.
#
#   scripts/jacobi-side-by-side.sh SRC [BINARY] [SIZES]
#   e.g. scripts/jacobi-side-by-side.sh gpu/jacobi ./gpu/haloscope "16384 20480"
#
# Prints their "N GPUs … efficiency" lines and then haloscope's
# `bench --runtime cuda --plane` table on the same GPUs. (nccl_overlap needs MPI: not run.)
set -uo pipefail
src=${1:?"the path of a copy of NVIDIA/multi-gpu-programming-models"}
bin=${2:-./haloscope}
sizes=${3:-"16384 20480"}
export NCCL_NVLS_ENABLE=0
variants="multi_threaded_copy multi_threaded_copy_overlap multi_threaded_p2p"
for v in $variants; do
  (cd "$src/$v" && nvcc -DHAVE_CUB -Xcompiler -fopenmp -lineinfo -ldl -arch sm_90 -std=c++17 jacobi.cu -o jacobi 2> build.log) \
    || { echo "building $v failed:"; tail -5 "$src/$v/build.log"; }
done
ngpu=$(nvidia-smi -L | wc -l)
gpus=$(seq -s, 0 $((ngpu - 1)))
for n in $sizes; do
  for v in $variants; do
    [ -x "$src/$v/jacobi" ] || continue
    line=$(timeout 300 "$src/$v/jacobi" -nx "$n" -ny "$n" -niter 1000 -nccheck 100000 2>&1 | grep "efficiency")
    echo "jacobi $v ${n}²: $line"
  done
done
"$bin" bench --runtime cuda --gpus "$gpus" --plane "$(echo $sizes | tr ' ' ,)" --seconds 0.3
