#!/bin/bash
# On an H200 (device: carry ["gpu"], run `bash gpu/run.sh`): builds every export of
# gpu/bundle.tgz with the README's nvcc line, runs it, compares its fields with haloscope's
# bit for bit and times it beside the cuda runtime (gpu/haloscope-new); the broken modes
# three times each; compute-sanitizer memcheck on two short exports. Prints a table last.
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
G=$PWD/gpu; W=/tmp/w; mkdir -p $W; tar xzf $G/bundle.tgz -C $W
H=$G/haloscope-new; chmod +x $H
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ls -d $W/exports/*/* | xargs -P 16 -I{} sh -c 'cd {} && nvcc -O3 --fmad=false -arch=sm_90 -Xcompiler -fopenmp main.cu -o halo > build.log 2>&1 || echo "BUILD FAIL {}"'
CORRECT="events host-sync overlap push wide-halo graph graph-push graph-flags fused fused-push fused-flags fused-overlap fused-p2p"
BROKEN="no-wait wait-before-record halo-overwrite write-after-read"
T=$OUT/table.txt
printf "%-10s %-16s %-20s %12s %12s\n" scenario mode "export vs haloscope" "export µs/st" "cuda µs/st" > $T
for sd in pulse:4 uneven:7 radiate:4; do
  s=${sd%:*}; n=${sd#*:}; g=$(printf '0,%.0s' $(seq $n)); g=${g%,}
  for m in $CORRECT; do
    e=$W/exports/$s/$m; st=$(awk '/^steps/{print $2}' $e/data/scenario.txt)
    (cd $e && timeout 30 ./halo > run.log 2>&1; echo "rc $?" >> run.log)
    us=$(grep -o '[0-9.]* us per step' $e/run.log | awk '{print $1}')
    cmp=$(python3 $G/compare.py $e/fields $W/refs/$s/$st 2>&1 | tail -1)
    cu=$(timeout 30 $H --headless --runtime cuda --gpus $g --scenario $s --mode $m --no-reference --json 2>/dev/null \
         | python3 -c "import json,sys; print('%.2f' % json.load(sys.stdin)['measured_step_us'])" 2>/dev/null)
    printf "%-10s %-16s %-20s %12s %12s\n" $s $m "${cmp:0:20}" "${us:-FAIL}" "${cu:-FAIL}" >> $T
    grep -q "rc 0" $e/run.log || { echo "== $s $m"; tail -5 $e/run.log; } >> $OUT/failures.txt
  done
  for m in $BROKEN; do
    e=$W/exports/$s/$m; st=$(awk '/^steps/{print $2}' $e/data/scenario.txt); r=""
    for i in 1 2 3; do
      (cd $e && rm -rf fields && timeout 30 ./halo > run.log 2>&1)
      r="$r $(python3 $G/compare.py $e/fields $W/refs/$s/$st | awk '{print $2}')"
    done
    cu=$(timeout 30 $H --headless --runtime cuda --gpus $g --scenario $s --mode $m --json 2>/dev/null \
         | python3 -c "import json,sys; print('%.3g' % json.load(sys.stdin)['max_abs_diff'])" 2>/dev/null)
    echo "broken $s $m: the export's max|Δ| in 3 runs:$r; the cuda runtime's ${cu:-FAIL}" >> $OUT/broken.txt
  done
  e=$W/exports/$s/cross-device-record
  (cd $e && timeout 30 ./halo > run.log 2>&1; echo "rc $?" >> run.log)
  echo "cross-device-record $s, the export: $(tail -2 $e/run.log | tr '\n' ' ')" >> $OUT/broken.txt
done
for m in events fused-p2p; do
  (cd $W/exports/sanitize/$m && timeout 120 compute-sanitizer --tool memcheck ./halo > $OUT/memcheck-$m.txt 2>&1)
  echo "memcheck $m: $(tail -1 $OUT/memcheck-$m.txt)" >> $OUT/broken.txt
done
cat $OUT/failures.txt $OUT/broken.txt $T 2>/dev/null
