# Helpers for footprints.sh and unpatch.sh, sourced on the H200 from gpu/ (H, OUT set).
# watch_for_hang PID SECONDS FILE: waits for PID; past SECONDS, every thread's stack of it
# and its children to FILE (gdb), then kills them; its exit status, 124 when it hung.
tree() { echo $1; for c in $(ps -o pid= --ppid $1); do tree $c; done; }
watch_for_hang() {
  local pid=$1
  for i in $(seq $(($2 * 4))); do kill -0 $pid 2>/dev/null || { wait $pid; return; }; sleep 0.25; done
  local gdb=$(command -v gdb || command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null)
  for p in $(tree $pid); do
    echo "== $p: $(tr '\0' ' ' < /proc/$p/cmdline)" >> $3
    [ -n "$gdb" ] && timeout -s KILL 20 $gdb -p $p -batch -ex "thread apply all bt" >> $3 2>&1
    [ -z "$gdb" ] && for t in /proc/$p/task/*; do echo "-- $t $(cat $t/wchan 2>/dev/null)"; cat $t/stack 2>/dev/null; done >> $3
  done
  for p in $(tree $pid); do kill -9 $p 2>/dev/null; done
  return 124  # not waited for: a process stuck in the driver may take its time to go
}
# best CMD…: the least of REPEAT (2) runs' seconds.
best() { b=999; for i in $(seq ${REPEAT:-2}); do t0=$(date +%s.%N); timeout 240 "$@" > /dev/null 2>&1; t1=$(date +%s.%N); b=$(python3 -c "print(min($b, $t1-$t0))"); done; echo $b; }
# rec NAME DIR ACCESS CMD…: records CMD in DIR with footprints, checks it three ways.
rec() {
  local n=$1 d=$2 a=$3; shift 3
  local t0=$(date +%s.%N)
  (cd $d && exec $H record --out $OUT/f/$n.recording -- "$@" > $OUT/f/$n.run.txt 2>&1) &
  watch_for_hang $! ${HANG_S:-120} $OUT/f/$n.stacks.txt
  local rc=$? t1=$(date +%s.%N)
  # A hang with modules unpatched between signatures (the default): the rest keep them
  # patched (HALOSCOPE_UNPATCH=0).
  [ $rc = 124 ] && [ "$HALOSCOPE_UNPATCH" != 0 ] && { HUNG=$n; export HALOSCOPE_UNPATCH=0; }
  local args=""; [ -n "$a" ] && args="--annotations $a"
  for m in measured annotated conservative; do
    $H check --recording $OUT/f/$n.recording $args --model $m > $OUT/f/$n.$m.txt 2>&1
  done
  f() { head -1 $1 | sed -n 's/.*: \([0-9]*\) finding(s)$/\1/p'; }
  local l=$(sed -n 's/^kernel footprints: \([0-9]*\) launch(es) measured.*, \([0-9]*\) reusing.*, \([0-9]*\) without.*/\1\/\2\/\3/p' $OUT/f/$n.measured.txt)
  local calls=$(sed -n 's/^recording [^:]*: \([0-9]*\) calls.*/\1/p' $OUT/f/$n.measured.txt)
  local bytes=$(stat -c %s $OUT/f/$n.recording 2>/dev/null || echo 0)
  printf "%-36s %4s %8s %9s %12s %14s %7s %8s %6.1f\n" "$n" "$rc" "$(f $OUT/f/$n.measured.txt)" "$(f $OUT/f/$n.annotated.txt)" \
    "$(f $OUT/f/$n.conservative.txt)" "${l:--}" "${calls:-0}" "$bytes" "$(python3 -c "print($t1-$t0)")" >> $T
}
