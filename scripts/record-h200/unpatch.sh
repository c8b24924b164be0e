#!/bin/bash
# On an H200 (device: carry ["gpu"], `bash gpu/unpatch.sh`), after scripts/record-h200/prep.sh
# here (given the fetched multi-gpu-programming-models): issue 55's unpatching (HALOSCOPE_UNPATCH=1, now the default: a module unpatched
# as the call of the launch that closed it returns, patched again at a new launch's driver
# call's entry) on tests/cuda/footprint.cu (three kernels of one module, so a module patched
# again after it was unpatched) and NVIDIA's multi-threaded Jacobi variants on the one GPU
# (multi_threaded_copy with 2 and 3 OpenMP threads and a wait removed; every variant on 3
# threads, correct and with its top wait removed), each beside the same recorded with its
# modules kept patched (HALOSCOPE_UNPATCH=0), each watched for a hang (HANG_S, 20 s: its
# threads' top frames printed; DEBUG=1: each patch and unpatch counted). Then what it costs,
# 1,000 iterations at 1024² and 16384², against the plain run (one run each; a run past CAP_S,
# 90 s, is cut and shown as such), and the races each broken variant's check names. Prints a
# table last.
export NCCL_NVLS_ENABLE=0
G=$PWD/gpu; OUT=${OUT:-/tmp/out}; mkdir -p $OUT/f; cd $G; chmod +x haloscope; H=$G/haloscope
source $G/fp-lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvcc -O3 -arch=sm_90 footprint.cu -o footprint &
bash mt-build.sh broken &
wait
T=$OUT/unpatch-table.txt; : > $T
export HANG_S=${HANG_S:-20}
C=mt/multi_threaded_copy
# frames FILE: each thread's top frames of a hang's stacks.
frames() { awk '/^Thread /{n=0; print; next} /^#[0-9]+ /{if (n++ < 7) print "   " $0}' $1 | cut -c1-160; }
printf "%-36s %4s %8s %9s %12s %14s %7s %8s %6s\n" program exit measured annotated conservative "meas/reuse/no" calls bytes "s" >> $T
for how in kept 1; do
  HUNG=; unset HALOSCOPE_UNPATCH HALOSCOPE_DEBUG
  export HALOSCOPE_UNPATCH=$([ $how = kept ] && echo 0 || echo $how)
  [ $how != kept ] && [ -n "$DEBUG" ] && export HALOSCOPE_DEBUG=1
  rec $how-footprint . "" ./footprint
  [ -z "$HUNG" ] && rec $how-footprint-race . "" ./footprint race
  for t in 2 3; do [ -z "$HUNG" ] && { export THREADS=$t; rec $how-copy-$t $C "" ./jacobi -niter 20 -nx 1024 -ny 1024; unset THREADS; }; done
  [ -z "$HUNG" ] && { export THREADS=2; rec $how-copy-2-broken $C/broken "" ./jacobi -niter 20 -nx 1024 -ny 1024; unset THREADS; }
  # Every variant, correct and with its top wait removed, on 3 threads (with 2, top and bottom
  # are the one neighbour: the p2p variants' removed wait is still made through the bottom
  # one's event), the norm read back once (-nccheck 1000: else a stream synchronisation and
  # barriers every iteration order everything, and no wait removed opens a race).
  for v in mt/*/; do v=${v%/}; [ -z "$HUNG" ] && [ -x $v/broken/jacobi ] && { export THREADS=3
    rec $how-$(basename $v)-3-nc $v "" ./jacobi -niter 20 -nx 1024 -ny 1024 -nccheck 1000
    rec $how-$(basename $v)-3-nc-broken $v/broken "" ./jacobi -niter 20 -nx 1024 -ny 1024 -nccheck 1000; unset THREADS; }; done
  [ $how != kept ] && echo "  $how: $(cat $OUT/f/$how-*.run.txt | grep -c ' unpatched (0)') unpatched, $(cat $OUT/f/$how-*.run.txt | grep -c ' patched (0)') patched$([ -n "$HUNG" ] && echo ", HUNG at $HUNG")" >> $T
  [ -n "$HUNG" ] && { echo "== $how hung at $HUNG:"; frames $OUT/f/$HUNG.stacks.txt | head -60; tail -5 $OUT/f/$HUNG.run.txt; }
  eval "HUNG_$how=\$HUNG"
done
unset HALOSCOPE_UNPATCH HALOSCOPE_DEBUG
# What each costs against the plain run (1,000 iterations).
export REPEAT=1 THREADS=2
CAP="timeout ${CAP_S:-90}"
printf "\n%-16s %8s %8s %8s %8s %8s %8s\n" "copy, 2 threads" "plain s" "no fp s" "kept s" "unpatch s" "kept x" "unpatch x" >> $T
cd $C
for size in 1024 16384; do
  p=$(best ./jacobi -niter 1000 -nx $size -ny $size)
  rm -f /tmp/q.rec; q=$(best $CAP $H record --no-footprints --out /tmp/q.rec -- ./jacobi -niter 1000 -nx $size -ny $size)
  rm -f /tmp/k.rec; k=-; [ $size = 1024 ] && k=$(best $CAP env HALOSCOPE_UNPATCH=0 $H record --out /tmp/k.rec -- ./jacobi -niter 1000 -nx $size -ny $size)
  u=-; [ -z "$HUNG_1" ] && u=$(best $CAP env HALOSCOPE_UNPATCH=1 $H record --out /tmp/u.rec -- ./jacobi -niter 1000 -nx $size -ny $size)
  x() { [ "$1" = - ] && echo - || python3 -c "print('%.1fx' % ($1/$p))"; }
  printf "%-16s %8.2f %8.2f %8s %8s %8s %8s\n" "${size}² x 1000" $p $q $k $u $(x $k) $(x $u) >> $T
  for r in u; do [ -f /tmp/$r.rec ] && echo "  $r: $($H check --recording /tmp/$r.rec 2>&1 | head -1 | sed 's/^recording [^:]*: //'); $($H check --recording /tmp/$r.rec 2>&1 | grep '^kernel footprints')" >> $T; rm -f /tmp/$r.rec; done
done
cd $G
# The races each broken variant's measured check names (kind, allocation, the two calls).
for f in $OUT/f/1-*broken.measured.txt; do
  echo "== $(basename $f .measured.txt): $(head -1 $f | sed 's/.*: //')"
  grep -A2 -E "^(RAW|WAR|WAW|INVALID)" $f | grep -v '^--' | cut -c1-150 | head -9
done
cat $T
