#!/bin/bash
# On an H200 (device: carry ["gpu"], `bash gpu/run.sh`), after scripts/record-h200/prep.sh
# here: builds the seed programs (tests/cuda/), NVIDIA's single_gpu Jacobi (when a fetched
# copy is in gpu/jacobi/) and the exports in gpu/exports/, records each with
# `haloscope record`, checks each recording, and measures what recording costs: the
# corrected seed (two threads, events, peer copies, kernels) plain and recorded, best of 3,
# at 2^16 and 2^24 cells per device, and its peak memory at 2,000 and 20,000 steps. Prints
# a table last; the recordings come back in $OUT/r.tgz.
export NCCL_NVLS_ENABLE=0
G=$PWD/gpu; OUT=${OUT:-/tmp/out}; mkdir -p $OUT/r; cd $G; chmod +x haloscope; H=$G/haloscope
nvcc -O3 -arch=sm_90 -Xcompiler -fopenmp seed.cu -o seed &
nvcc -O3 -arch=sm_90 -Xcompiler -fopenmp seed-fixed.cu -o seed-fixed &
nvcc -O3 -arch=sm_90 graph-once.cu -o graph-once &
nvcc -O3 -arch=sm_90 pitched.cu -o pitched &
[ -f jacobi/jacobi.cu ] && (cd jacobi && nvcc -DHAVE_CUB -Xcompiler -fopenmp -lineinfo -DUSE_NVTX -ldl \
  -arch=sm_90 -std=c++17 jacobi.cu -o jacobi > build.log 2>&1 || echo "jacobi: build failed") &
ls -d exports/* 2>/dev/null | xargs -r -P 14 -I{} sh -c \
  'cd {} && nvcc -O3 --fmad=false -arch=sm_90 -Xcompiler -fopenmp main.cu -o halo > build.log 2>&1 || echo "BUILD FAIL {}"'
wait
T=$OUT/table.txt; : > $T
for i in 1 2 3; do $H record --out $OUT/r/seed-$i.recording -- ./seed 40 > /dev/null 2>&1; echo "seed run $i: exit $?" >> $T; done
$H record --out $OUT/r/seed-fixed.recording -- ./seed-fixed 40 > /dev/null 2>&1
# Two CUDA processes under one record: a recording each, listed in the closing summary.
$H record --out $OUT/r/two.recording -- sh -c './seed-fixed 40 & ./seed-fixed 40; wait' > /dev/null 2> $OUT/two.log
echo "two processes: exit $?; $(ls $OUT/r/two.*.recording 2>/dev/null | wc -l) recordings; $(grep -c 'calls on' $OUT/two.log) summary lines" >> $T
$H record --out $OUT/r/graph-once.recording -- ./graph-once 20 > /dev/null 2>&1
$H record --out $OUT/r/graph-once-broken.recording -- ./graph-once 20 broken > /dev/null 2>&1
$H record --out $OUT/r/pitched.recording -- ./pitched 10 > /dev/null 2>&1
$H record --out $OUT/r/pitched-broken.recording -- ./pitched 10 broken > /dev/null 2>&1
for e in exports/*; do [ -d $e ] || continue; m=$(basename $e)
  (cd $e && $H record --out $OUT/r/$m.recording -- ./halo > /dev/null 2>&1)
done
[ -x jacobi/jacobi ] && (cd jacobi && $H record --out $OUT/r/jacobi.recording -- ./jacobi -niter 20 -nx 1024 -ny 1024 > /dev/null 2>&1)
for r in $OUT/r/*.recording; do
  n=$(basename $r .recording); a=""; [ -f exports/$n/kernels/access.txt ] && a="--annotations exports/$n/kernels/access.txt"
  case $n in graph-once*) a="--annotations graph-once.access.txt";; pitched*) a="--annotations pitched.access.txt";; esac
  $H check --recording $r $a > $OUT/r/$n.check.txt 2>&1
  printf "%-24s %s\n" "$n" "$(head -1 $OUT/r/$n.check.txt | sed 's/.*: \([0-9]* calls\)/\1/')" >> $T
done
printf "\n%-10s %-9s %12s %12s %7s\n" cells/dev steps "plain s" "recorded s" ratio >> $T
for cells in 65536 16777216; do
  best() { b=999; for i in 1 2 3; do t0=$(date +%s.%N); "$@" > /dev/null 2>&1; t1=$(date +%s.%N); b=$(python3 -c "print(min($b, $t1-$t0))"); done; echo $b; }
  p=$(best ./seed-fixed 2000 $cells)
  r=$(best sh -c "rm -f /tmp/o.rec; $H record --out /tmp/o.rec -- ./seed-fixed 2000 $cells")
  printf "%-10s %-9s %12.3f %12.3f %6.2fx\n" $cells 2000 $p $r $(python3 -c "print($r/$p)") >> $T
done
calls=$($H check --recording /tmp/o.rec 2>/dev/null | sed -n 's/^recording [^:]*: \([0-9]*\) calls.*/\1/p')
bytes=$(stat -c %s /tmp/o.rec)
echo "recording of 2000 steps: $calls calls in $bytes bytes: $(python3 -c "print(round($bytes/$calls, 1))") B a call" >> $T
gcc -shared -fPIC -O2 -I. -o libinj.so haloscope_inject.c -ldl -lpthread
CUPTI=$(python3 -c "import nvidia.cu13 as m, os; print(os.path.join(m.__path__[0], 'lib', 'libcupti.so.13'))")
for steps in 2000 20000; do
  /usr/bin/time -f "peak memory, $steps steps, plain:    %M KiB" ./seed-fixed $steps 65536 > /dev/null 2>> $T
  rm -f /tmp/m.*.rec; CUDA_INJECTION64_PATH=$G/libinj.so HALOSCOPE_CUPTI=$CUPTI HALOSCOPE_RECORD_PREFIX=/tmp/m. HALOSCOPE_RECORD_SUFFIX=.rec \
    /usr/bin/time -f "peak memory, $steps steps, recorded: %M KiB" ./seed-fixed $steps 65536 > /dev/null 2>> $T
done
(cd $OUT && tar czf r.tgz r && rm -rf r)
cat $T
