#!/bin/bash
# On an H200 (device: carry ["gpu"], `bash gpu/long.sh`), after scripts/record-h200/prep.sh
# with NVIDIA's multi-gpu-programming-models given: its multi-threaded Jacobi (the copy
# variant, THREADS=2 on the one GPU, 1024²) recorded long enough for about CALLS calls
# (default 1,000,000), without footprints and with them; each recording checked there (its
# time and peak memory); the recordings come back gzipped in $OUT for the 2-core machine's
# `haloscope check` and `bench --checker --recording`. Prints a table last.
export NCCL_NVLS_ENABLE=0
G=$PWD/gpu; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; cd $G; chmod +x haloscope; H=$G/haloscope
CALLS=${CALLS:-1000000}
T=$OUT/long.txt; : > $T
bash mt-build.sh > $OUT/mt-build.log 2>&1
cd mt/multi_threaded_copy || exit 1
export THREADS=2
calls() { $H check --recording "$1" 2>/dev/null | sed -n 's/^recording [^:]*: \([0-9]*\) calls.*/\1/p'; }
rm -f /tmp/c.rec; $H record --no-footprints --out /tmp/c.rec -- ./jacobi -niter 1000 -nx 1024 -ny 1024 > /dev/null 2>&1
per=$(calls /tmp/c.rec)
N=$(python3 -c "print(max(1000, int(1000 * $CALLS / max(1, ${per:-1}))))")
echo "calibration: -niter 1000 made ${per:-?} calls; -niter $N for about $CALLS" >> $T
secs() { local t0=$(date +%s.%N); "$@" > /dev/null 2>&1; local rc=$?; local t1=$(date +%s.%N); python3 -c "print('%.2f' % ($t1 - $t0))"; return $rc; }
p=$(secs ./jacobi -niter $N -nx 1024 -ny 1024)
printf "%-22s %10s %10s %9s %10s %10s\n" run "calls" "run s" findings "check s" "check MB" >> $T
printf "%-22s %10s %10s\n" plain - $p >> $T
for fp in no-footprints footprints; do
  f=/tmp/jacobi-$fp.recording; rm -f $f
  flag=""; [ $fp = no-footprints ] && flag=--no-footprints
  r=$(secs $H record $flag --out $f -- ./jacobi -niter $N -nx 1024 -ny 1024)
  /usr/bin/time -f "%e %M" -o /tmp/ct.txt $H check --recording $f > /tmp/check-$fp.txt 2>&1
  read cs ckb < <(tail -1 /tmp/ct.txt)
  n=$(sed -n 's/^recording [^:]*: \([0-9]*\) calls.*/\1/p' /tmp/check-$fp.txt)
  k=$(sed -n 's/.*: \([0-9]*\) finding(s)$/\1/p' /tmp/check-$fp.txt | head -1)
  printf "%-22s %10s %10s %9s %10s %10s\n" "recorded, $fp" "$n" "$r" "$k" "$cs" "$((ckb / 1024))" >> $T
  head -3 /tmp/check-$fp.txt > $OUT/check-$fp.txt
  gzip -1 -c $f > $OUT/jacobi-$fp.recording.gz
  echo "$fp: $(stat -c %s $f) bytes, gzipped $(stat -c %s $OUT/jacobi-$fp.recording.gz)" >> $T
done
nvidia-smi --query-gpu=name --format=csv,noheader >> $T
cat $T
