#!/usr/bin/env bash
# The UI on the cuda runtime, on a machine with 2+ NVIDIA GPUs and only the built binary:
# drives it off-screen with `--screen KEYS`, keeps every screen under $OUT/screens, and
# prints one line per check (ok/FAIL and what was looked for) and the count of failures.
#
#   scripts/gpu-ui-check.sh [BINARY]
set -uo pipefail
bin=${1:-./haloscope}
out=${OUT:-/tmp}/screens
mkdir -p "$out"
fails=0
results=()
# check NAME PATTERN ARGS...: the screen of `haloscope ARGS` must match PATTERN (grep -E).
check() {
  local name=$1 pattern=$2
  shift 2
  local t0=$SECONDS
  timeout 90 "$bin" "$@" > "$out/$name.txt" 2> "$out/$name.err"
  local rc=$?
  if [ $rc -eq 0 ] && grep -qE -- "$pattern" "$out/$name.txt"; then
    results+=("$(printf 'ok    %-22s %3ss  /%s/' "$name" $((SECONDS - t0)) "$pattern")")
  else
    fails=$((fails + 1))
    results+=("$(printf 'FAIL  %-22s %3ss  /%s/ rc=%s %s' "$name" $((SECONDS - t0)) "$pattern" "$rc" "$(head -c 300 "$out/$name.err")")")
  fi
}
race=race   # the built-in scenario: 2^23 cells on 2 devices, a pulse at their boundary
c=(--runtime cuda --gpus 0,1)
check steps 'PAUSED +cuda.*step 3 .*max \|Δ\| 0' "${c[@]}" --paused --screen "n n n"
check timeline 'Timeline: steps 0–3 \(GPU clock\)' "${c[@]}" --paused --screen "n n n n tab tab z"
check micro-next '▶' "${c[@]}" --paused --screen "n . . . ."
check micro-queues 'streams: queued' "${c[@]}" --paused --screen "n . . . . . tab z"
check micro-finish 'step 2 .*max \|Δ\| 0' "${c[@]}" --paused --screen "n . . . . . n"
check compact 'cuda' "${c[@]}" --paused --screen "n n" --size 80x24
check running 'cuda.*max \|Δ\| 0' "${c[@]}" --screen "wait:3000 space"
check running-max 'cuda.*max \|Δ\| 0' "${c[@]}" --screen "+ + + + + + wait:3000 space"
check mode-switch 'host-sync.*max \|Δ\| 0' "${c[@]}" --paused --screen "n n m n n"
check links 'peers: .*(direct|staged)' "${c[@]}" --paused --screen "n tab tab tab z" --size 160x60
check cross-device 'invalid resource handle' "${c[@]}" --paused --mode cross-device-record --screen "n"
check reset-after-error 'PAUSED .*step 1 .*max \|Δ\| 0' "${c[@]}" --paused --mode cross-device-record --screen "n M n"
# 2^23 cells: the CPU reference (~10 ms a step) sets the pace; 100 steps/s keeps up.
check race-no-wait 'max \|Δ\| [0-9.]+e' "${c[@]}" --scenario "$race" --mode no-wait --screen "wait:3000 space"
check race-events 'max \|Δ\| 0' "${c[@]}" --scenario "$race" --screen "wait:3000 space"
check fused-steps 'PAUSED +cuda.*fused .*step 32 .*max \|Δ\| 0' "${c[@]}" --paused --mode fused --screen "n n"
check fused-timeline 'Timeline: steps 16–31 \(one round; GPU clock\)' "${c[@]}" --paused --mode fused --screen "n n tab tab z"
check wide-running 'cuda.*wide-halo.*max \|Δ\| 0' "${c[@]}" --mode wide-halo --screen "wait:3000 space"
check switch-to-fused 'fused .*step 18 .*max \|Δ\| 0' "${c[@]}" --paused --screen "n n m m m m m n"
check race-fused 'fused.*max \|Δ\| 0' "${c[@]}" --scenario "$race" --mode fused --screen "wait:3000 space"
check eight-on-two '8 dev' --runtime cuda --gpus 0,0,0,0,1,1,1,1 --devices 8 --paused --screen "n n"
check eight-compact '8 dev' --runtime cuda --gpus 0,0,0,0,1,1,1,1 --devices 8 --paused --screen "n n" --size 80x24
# Errors before the UI: exit code 2 and the reason.
for bad in "9,9" "0,x"; do
  timeout 60 "$bin" --runtime cuda --gpus "$bad" --screen n > /dev/null 2> "$out/bad-$bad.err"
  rc=$?
  line="$(printf '%-5s %-22s rc=%s %s' "$([ $rc -eq 2 ] && echo ok || echo FAIL)" "--gpus $bad" $rc "$(head -n 1 "$out/bad-$bad.err")")"
  [ $rc -eq 2 ] || fails=$((fails + 1))
  results+=("$line")
done
echo
echo "== haloscope UI on the cuda runtime: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1)"
printf '%s\n' "${results[@]}"
echo "failures: $fails (screens in $out)"
