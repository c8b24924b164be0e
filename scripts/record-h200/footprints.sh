#!/bin/bash
# On an H200 (device: carry ["gpu"], `bash gpu/footprints.sh`), after
# scripts/record-h200/prep.sh here (given the fetched multi-gpu-programming-models): issue
# 55's checks. Each program is recorded with kernel footprints measured on the GPU (the
# default: the first launch of each signature), and the recording checked three ways:
# --model measured, annotated (the export's kernels/access.txt where it has one) and
# conservative. Programs: tests/cuda/footprint.cu (disjoint bytes of one allocation, and
# its race), the seed and its correction, NVIDIA's single_gpu and multi-threaded Jacobi
# variants with 2 and 3 OpenMP threads on the one GPU (a few lines changed here, in this
# copy, as host-sync.sh does), each multi-threaded copy also with one wait removed, and the
# exports. Then what measuring costs: NVIDIA's multi_threaded_copy with 2 threads at 16384²
# and 1024², plain, recorded without footprints, with the first launches measured, and every
# launch measured (SKIP_COST=1 leaves this out, SKIP_ALL=1 the last; REPEAT=N runs, best
# taken), and with modules unpatched between new signatures (HALOSCOPE_UNPATCH=1, also
# checked above on a few programs; UNPATCH=1: on every program). A recording that runs past
# HANG_S seconds (120) has its threads' stacks written beside it. Prints a table last.
export NCCL_NVLS_ENABLE=0
G=$PWD/gpu; OUT=${OUT:-/tmp/out}; mkdir -p $OUT/f; cd $G; chmod +x haloscope; H=$G/haloscope
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvcc -O3 -arch=sm_90 footprint.cu -o footprint &
nvcc -O3 -arch=sm_90 -Xcompiler -fopenmp seed.cu -o seed &
nvcc -O3 -arch=sm_90 -Xcompiler -fopenmp seed-fixed.cu -o seed-fixed &
[ -f jacobi/jacobi.cu ] && (cd jacobi && nvcc -DHAVE_CUB -Xcompiler -fopenmp -lineinfo -DUSE_NVTX -ldl \
  -arch=sm_90 -std=c++17 jacobi.cu -o jacobi > build.log 2>&1 || echo "jacobi: build failed") &
# The multi-threaded variants, and each with one wait removed (broken/).
bash mt-build.sh broken &
ls -d exports/* 2>/dev/null | xargs -r -P 14 -I{} sh -c \
  'cd {} && nvcc -O3 --fmad=false -arch=sm_90 -Xcompiler -fopenmp main.cu -o halo > build.log 2>&1 || echo "BUILD FAIL {}"'
wait
T=$OUT/fp-table.txt; : > $T
source $G/fp-lib.sh
printf "%-36s %4s %8s %9s %12s %14s %7s %8s %6s\n" program exit measured annotated conservative "meas/reuse/no" calls bytes "s" >> $T
# UNPATCH=1: every program below recorded with modules unpatched between new signatures.
[ -n "$UNPATCH" ] && export HALOSCOPE_UNPATCH=1 HALOSCOPE_DEBUG=1
rec footprint . "" ./footprint
rec footprint-race . "" ./footprint race
rec seed . "" ./seed 40
rec seed-fixed . "" ./seed-fixed 40
[ -x jacobi/jacobi ] && rec single_gpu jacobi "" ./jacobi -niter 20 -nx 1024 -ny 1024
for v in mt/*/; do v=${v%/}; [ -x $v/jacobi ] || continue
  for t in 2 3; do export THREADS=$t; rec $(basename $v)-$t $v "" ./jacobi -niter 20 -nx 1024 -ny 1024; unset THREADS; done
  [ -x $v/broken/jacobi ] && { export THREADS=2; rec $(basename $v)-2-broken $v/broken "" ./jacobi -niter 20 -nx 1024 -ny 1024; unset THREADS; }
done
for e in exports/*; do [ -x $e/halo ] || continue; m=$(basename $e)
  a=""; [ -f $e/kernels/access.txt ] && a=$G/$e/kernels/access.txt
  rec export-$m $e "$a" ./halo
done
unset HALOSCOPE_UNPATCH HALOSCOPE_DEBUG
[ -n "$HUNG" ] && echo "HALOSCOPE_UNPATCH=1 hung at $HUNG: its stacks in f/$HUNG.stacks.txt" >> $T
# The same with modules unpatched between new signatures (HALOSCOPE_UNPATCH=1).
[ -z "$HUNG" ] && export HALOSCOPE_UNPATCH=1
rec unpatch-footprint . "" ./footprint
rec unpatch-footprint-race . "" ./footprint race
[ -x mt/multi_threaded_copy/jacobi ] && { export THREADS=3; rec unpatch-multi_threaded_copy-3 mt/multi_threaded_copy "" ./jacobi -niter 20 -nx 1024 -ny 1024; unset THREADS; }
[ -x mt/multi_threaded_p2p/jacobi ] && { export THREADS=3; rec unpatch-multi_threaded_p2p-3 mt/multi_threaded_p2p "" ./jacobi -niter 20 -nx 1024 -ny 1024; unset THREADS; }
[ -x exports/fused-p2p/halo ] && rec unpatch-export-fused-p2p exports/fused-p2p "" ./halo
unset HALOSCOPE_UNPATCH
# What measuring costs, against the plain run, best of 2 (1,000 iterations at each size).
printf "\n%-22s %9s %12s %12s %12s %12s %10s %10s %10s\n" "multi_threaded_copy" "plain s" "no fp s" "first s" "unpatch s" "all s" "first x" "unpatch x" "all x" >> $T
if [ -x mt/multi_threaded_copy/jacobi ] && [ -z "$SKIP_COST" ]; then
  cd mt/multi_threaded_copy; export THREADS=2
  for size in "1024 1000" "16384 1000"; do set -- $size
    p=$(best ./jacobi -niter $2 -nx $1 -ny $1)
    q=$(best sh -c "rm -f /tmp/q.rec; $H record --no-footprints --out /tmp/q.rec -- ./jacobi -niter $2 -nx $1 -ny $1")
    r=$(best sh -c "rm -f /tmp/r.rec; $H record --out /tmp/r.rec -- ./jacobi -niter $2 -nx $1 -ny $1")
    u=0; [ -z "$HUNG" ] && u=$(best sh -c "rm -f /tmp/u.rec; HALOSCOPE_UNPATCH=1 $H record --out /tmp/u.rec -- ./jacobi -niter $2 -nx $1 -ny $1")
    a=0; [ -z "$SKIP_ALL" ] && a=$(best sh -c "rm -f /tmp/a.rec; $H record --footprints all --out /tmp/a.rec -- ./jacobi -niter $2 -nx $1 -ny $1")
    printf "%-22s %9.2f %12.2f %12.2f %12.2f %12.2f %9.1fx %9.1fx %9.1fx\n" "${1}² x $2" $p $q $r $u $a $(python3 -c "print($r/$p)") $(python3 -c "print($u/$p)") $(python3 -c "print($a/$p)") >> $T
    echo "  unpatched: $($H check --recording /tmp/u.rec 2>/dev/null | sed -n 2p)" >> $T
    echo "  recordings: no fp $(stat -c %s /tmp/q.rec) B, first $(stat -c %s /tmp/r.rec) B; $($H check --recording /tmp/r.rec 2>/dev/null | head -1 | sed 's/^recording [^:]*: //')" >> $T
  done
  unset THREADS; cd $G
fi
(cd $OUT && tar czf f.tgz f && rm -rf f)
cat $T
