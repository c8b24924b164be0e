#!/bin/bash
# On an H200 (device: carry ["gpu"], `bash gpu/footprints.sh`), after
# scripts/record-h200/prep.sh here (given the fetched multi-gpu-programming-models): issue
# 55's checks. Each program is recorded with kernel footprints measured on the GPU (the
# default: the first launch of each signature), and the recording checked three ways:
# --model measured, annotated (the export's kernels/access.txt where it has one) and
# conservative. Programs: tests/cuda/footprint.cu (disjoint bytes of one allocation, and
# its race), the seed and its correction, NVIDIA's single_gpu and multi-threaded Jacobi
# variants with 2 and 3 OpenMP threads on the one GPU (a few lines changed here, in this
# copy, as host-sync.sh does), each also on 3 threads with the norm read back once
# (-nccheck 1000: else a stream synchronisation and barriers every iteration order
# everything) correct and with its top wait removed, and the exports. Then what measuring
# costs: NVIDIA's multi_threaded_copy with 2 threads at 16384² and 1024², plain, recorded
# without footprints, with the first launches measured and modules unpatched between new
# signatures (HALOSCOPE_UNPATCH=1, as every program above is recorded unless KEPT=1), with
# modules kept patched (HALOSCOPE_UNPATCH=0), and every launch measured (SKIP_COST=1 leaves this out, SKIP_ALL=1
# the last; REPEAT=N runs, best taken). A
# recording that runs past HANG_S seconds (120) has its threads' stacks written beside it.
# Prints a table last, and the races each broken variant's check names.
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
export HALOSCOPE_UNPATCH=1; [ -n "$KEPT" ] && export HALOSCOPE_UNPATCH=0
rec footprint . "" ./footprint
rec footprint-race . "" ./footprint race
rec seed . "" ./seed 40
rec seed-fixed . "" ./seed-fixed 40
[ -x jacobi/jacobi ] && rec single_gpu jacobi "" ./jacobi -niter 20 -nx 1024 -ny 1024
for v in mt/*/; do v=${v%/}; [ -x $v/jacobi ] || continue
  for t in 2 3; do export THREADS=$t; rec $(basename $v)-$t $v "" ./jacobi -niter 20 -nx 1024 -ny 1024; unset THREADS; done
  export THREADS=3
  rec $(basename $v)-3-nc $v "" ./jacobi -niter 20 -nx 1024 -ny 1024 -nccheck 1000
  [ -x $v/broken/jacobi ] && rec $(basename $v)-3-nc-broken $v/broken "" ./jacobi -niter 20 -nx 1024 -ny 1024 -nccheck 1000
  unset THREADS
done
for e in exports/*; do [ -x $e/halo ] || continue; m=$(basename $e)
  a=""; [ -f $e/kernels/access.txt ] && a=$G/$e/kernels/access.txt
  rec export-$m $e "$a" ./halo
done
unset HALOSCOPE_UNPATCH
[ -n "$HUNG" ] && echo "unpatching hung at $HUNG (the rest kept modules patched): its stacks in f/$HUNG.stacks.txt" >> $T
# What measuring costs, against the plain run, best of 2 (1,000 iterations at each size).
printf "\n%-22s %9s %12s %12s %12s %12s %10s %10s %10s\n" "multi_threaded_copy" "plain s" "no fp s" "first s" "kept s" "all s" "first x" "kept x" "all x" >> $T
if [ -x mt/multi_threaded_copy/jacobi ] && [ -z "$SKIP_COST" ]; then
  cd mt/multi_threaded_copy; export THREADS=2
  for size in "1024 1000" "16384 1000"; do set -- $size
    p=$(best ./jacobi -niter $2 -nx $1 -ny $1)
    q=$(best sh -c "rm -f /tmp/q.rec; $H record --no-footprints --out /tmp/q.rec -- ./jacobi -niter $2 -nx $1 -ny $1")
    r=$(best sh -c "rm -f /tmp/r.rec; HALOSCOPE_UNPATCH=1 $H record --out /tmp/r.rec -- ./jacobi -niter $2 -nx $1 -ny $1")
    k=0; [ -z "$SKIP_KEPT" ] && k=$(best sh -c "rm -f /tmp/k.rec; HALOSCOPE_UNPATCH=0 $H record --out /tmp/k.rec -- ./jacobi -niter $2 -nx $1 -ny $1")
    a=0; [ -z "$SKIP_ALL" ] && a=$(best sh -c "rm -f /tmp/a.rec; $H record --footprints all --out /tmp/a.rec -- ./jacobi -niter $2 -nx $1 -ny $1")
    printf "%-22s %9.2f %12.2f %12.2f %12.2f %12.2f %9.1fx %9.1fx %9.1fx\n" "${1}² x $2" $p $q $r $k $a $(python3 -c "print($r/$p)") $(python3 -c "print($k/$p)") $(python3 -c "print($a/$p)") >> $T
    echo "  recordings: no fp $(stat -c %s /tmp/q.rec) B, first $(stat -c %s /tmp/r.rec) B; $($H check --recording /tmp/r.rec 2>/dev/null | head -1 | sed 's/^recording [^:]*: //'); $($H check --recording /tmp/r.rec 2>/dev/null | grep '^kernel footprints' | sed 's/ (captured.*//')" >> $T
  done
  unset THREADS; cd $G
fi
# The races each broken variant's measured check names (kind, allocation, the two calls).
for f in $OUT/f/*broken.measured.txt; do
  echo "== $(basename $f .measured.txt): $(head -1 $f | sed 's/.*: //')"
  grep -A2 -E "^(RAW|WAR|WAW|INVALID)" $f | grep -v '^--' | cut -c1-150 | head -9
done > $OUT/races.txt
# The exports' measured findings by kind (to set beside `haloscope check --mode M`'s).
for f in $OUT/f/export-*.measured.txt; do
  k=$(grep -oE "^(RAW|WAR|WAW|INVALID)" $f | sort | uniq -c | awk '{printf "%s %s, ", $2, $1}')
  [ -n "$k" ] && echo "$(basename $f .measured.txt): $k"
done >> $OUT/races.txt
(cd $OUT && tar czf f.tgz f && rm -rf f)
cat $OUT/races.txt
cat $T
