#!/bin/bash
# On an H200 (device: carry ["gpu"], `bash gpu/host-sync.sh`), after
# scripts/record-h200/prep.sh here (given the fetched multi-gpu-programming-models): issue
# 54's checks. Each program is recorded twice, with the host's own synchronisation (the
# default) and with --no-host-sync, and both recordings are checked, the first also with
# --ignore-host-sync (the same execution without its host records; and how many findings
# name a host synchronisation that orders the threads but not the GPU): the student program
# (tests/cuda/student.cu) correct and with its barrier left out, the corrected seed, the
# exports (host-sync among them), and NVIDIA's multi-threaded Jacobi variants run with 2
# and 3 OpenMP threads on the one GPU (a few lines changed here, in this copy: thread t
# drives GPU t mod the GPU count, no peer access asked of one GPU to itself). Then what
# recording the host costs: the corrected seed plain, recorded and recorded without the
# host, best of 3 (without kernel footprints: footprints.sh measures those). Prints a table
# last.
export NCCL_NVLS_ENABLE=0
G=$PWD/gpu; OUT=${OUT:-/tmp/out}; mkdir -p $OUT/h; cd $G; chmod +x haloscope; H=$G/haloscope
nvcc -O3 -arch=sm_90 -Xcompiler -fopenmp student.cu -o student &
nvcc -O3 -arch=sm_90 -Xcompiler -fopenmp seed-fixed.cu -o seed-fixed &
bash mt-build.sh &
ls -d exports/* 2>/dev/null | xargs -r -P 14 -I{} sh -c \
  'cd {} && nvcc -O3 --fmad=false -arch=sm_90 -Xcompiler -fopenmp main.cu -o halo > build.log 2>&1 || echo "BUILD FAIL {}"'
wait
T=$OUT/host-table.txt; : > $T
# rec NAME DIR ACCESS CMD…: records CMD in DIR both ways, checks both; a table row.
rec() {
  local n=$1 d=$2 a=$3; shift 3
  (cd $d && $H record --out $OUT/h/$n.recording -- "$@" > $OUT/h/$n.run.txt 2>&1)
  local rc=$?
  (cd $d && $H record --no-host-sync --out $OUT/h/$n.nohost.recording -- "$@" > /dev/null 2>&1)
  local args=""; [ -n "$a" ] && args="--annotations $a"
  $H check --recording $OUT/h/$n.recording $args > $OUT/h/$n.check.txt 2>&1
  $H check --recording $OUT/h/$n.nohost.recording $args > $OUT/h/$n.nohost.check.txt 2>&1
  $H check --recording $OUT/h/$n.recording --ignore-host-sync $args > $OUT/h/$n.ignored.check.txt 2>&1
  f() { head -1 $1 | sed -n 's/.*: \([0-9]*\) finding(s)$/\1/p'; }
  local hosts=$(sed -n 's/.*synchronisation (\([0-9]*\) record(s).*/\1/p' $OUT/h/$n.check.txt)
  local named=$(grep -c "the host orders them" $OUT/h/$n.check.txt)
  printf "%-34s %4s %9s %12s %8s %6s %6s\n" "$n" "$rc" "$(f $OUT/h/$n.check.txt)" "$(f $OUT/h/$n.nohost.check.txt)" "$(f $OUT/h/$n.ignored.check.txt)" "${hosts:-0}" "$named" >> $T
}
printf "%-34s %4s %9s %12s %8s %6s %6s\n" program exit findings "--no-host" ignored host named >> $T
rec student . "" ./student 20
rec student-broken . "" ./student 20 broken
rec student-nosync . "" ./student 20 nosync
export THREADS=3
rec student-3 . "" ./student 20
rec student-3-broken . "" ./student 20 broken
unset THREADS
rec seed-fixed . "" ./seed-fixed 40
for e in exports/*; do [ -x $e/halo ] || continue; m=$(basename $e)
  a=""; [ -f $e/kernels/access.txt ] && a=$G/$e/kernels/access.txt
  rec export-$m $e "$a" ./halo
done
for v in mt/*/; do v=${v%/}; [ -x $v/jacobi ] || continue
  for t in 2 3; do export THREADS=$t; rec $(basename $v)-$t $v "" ./jacobi -niter 20 -nx 1024 -ny 1024; done; unset THREADS
done
printf "\n%-10s %10s %12s %12s %8s %8s\n" cells/dev "plain s" "recorded s" "no host s" ratio "no host" >> $T
best() { b=999; for i in 1 2 3; do t0=$(date +%s.%N); "$@" > /dev/null 2>&1; t1=$(date +%s.%N); b=$(python3 -c "print(min($b, $t1-$t0))"); done; echo $b; }
for cells in 65536 16777216; do
  p=$(best ./seed-fixed 2000 $cells)
  r=$(best sh -c "rm -f /tmp/o.rec; $H record --no-footprints --out /tmp/o.rec -- ./seed-fixed 2000 $cells")
  q=$(best sh -c "rm -f /tmp/q.rec; $H record --no-footprints --no-host-sync --out /tmp/q.rec -- ./seed-fixed 2000 $cells")
  printf "%-10s %10.3f %12.3f %12.3f %7.2fx %7.2fx\n" $cells $p $r $q $(python3 -c "print($r/$p)") $(python3 -c "print($q/$p)") >> $T
done
echo "recorded 2000 steps: $(head -1 $OUT/h/seed-fixed.check.txt >/dev/null; $H check --recording /tmp/o.rec 2>/dev/null | head -1 | sed 's/^recording [^:]*: //'); without the host: $($H check --recording /tmp/q.rec 2>/dev/null | head -1 | sed 's/^recording [^:]*: //')" >> $T
(cd $OUT && tar czf h.tgz h && rm -rf h)
cat $T
