#!/usr/bin/env bash
# The GPU suite: run on a machine with NVIDIA GPUs and only the built binary
# (`cargo build --release --features cuda`; see the README). Prints a table last.
#
#   scripts/gpu-check.sh [BINARY] [STEPS]
#   MODES="push" BROKEN=0 scripts/gpu-check.sh ...   only these correct modes, no broken ones
#
# 1. every correct mode, N = 2 (one device per GPU), 4 (two per GPU), 8 (four per GPU):
#    max |Δ| against the reference (the sim's results, bit for bit) after STEPS steps: 0;
# 2. every broken mode, 5 runs on 2 devices, on the default scenario and on one with
#    2^22 cells per device: the step at which it first diverged (compared every 5 steps),
#    and cross-device-record's driver error;
# 3. the median halo-copy time against the measured peer-copy latency (7.3 µs, GPU.md);
# 4. compute-sanitizer memcheck and initcheck on a short run of each correct mode: 0 errors;
# 5. 2D: the fused modes (fused_steps_2d) on radiate and scripts/scenarios/plane-*.toml
#    (PEC and periodic sides, rows wider and narrower than a tile's region, Mur and PEC
#    rows, a hard line source) at N = 1, 2 and 4 for STEPS / 5 steps: max |Δ| 0; racecheck
#    (the kernel's shared memory) and memcheck of fused on two of them: 0 errors.
# 6. --trace on the GPU: fused-overlap on radiate, 2 devices, steps 32..64 kept: valid JSON,
#    only the rounds of those steps, every kernel and copy timed (a slice that lasts), bits 0.
set -uo pipefail
bin=${1:-./haloscope}
steps=${2:-10000}
log=${OUT:-/tmp}/gpu-check.log
: > "$log"
ngpu=$(nvidia-smi -L | wc -l)
[ "$ngpu" -ge 1 ] || { echo "gpu-check: no GPU" >&2; exit 1; }
# The flag modes (fused-flags, graph-flags) need a hardware queue per stream on a GPU:
# four devices on one GPU carry 20 (the runtime refuses them at the default 8, naming this).
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32}
# N logical devices in blocks over the GPUs: 2 -> 0,1; 4 -> 0,0,1,1; 8 -> 0,0,0,0,1,1,1,1.
gpus() { local n=$1 out="" d; for ((d = 0; d < n; d++)); do out+="${out:+,}$((d * ngpu / n))"; done; echo "$out"; }
field() { python3 -c "import json,sys; d=json.load(sys.stdin); v=d$1; print('-' if v is None else v)"; }
run() { echo "\$ $bin $*" >> "$log"; "$bin" "$@" 2>> "$log" | tee -a "$log"; }

# The modes, as the binary lists them (`--list --json`): correct ones, and broken ones that
# compute wrong values (cross-device-record fails with a driver error: checked below).
modes_where() { "$bin" --list --json | python3 -c "import json,sys; print(' '.join(m['name'] for m in json.load(sys.stdin)['modes'] if $1))"; }
correct_modes=${MODES:-$(modes_where "m['correct']")}
rows=()
for n in 2 4 8; do
  for mode in $correct_modes; do
    json=$(run --headless --runtime cuda --gpus "$(gpus $n)" --mode $mode --steps "$steps" --json) || json='{}'
    diff=$(echo "$json" | field "['max_abs_diff']" 2>/dev/null || echo FAILED)
    copy=$(echo "$json" | field "['copy_us_median'][1]" 2>/dev/null || echo -)
    step=$(echo "$json" | field "['measured_step_us']" 2>/dev/null || echo -)
    rows+=("$(printf '%-20s %-3s %-16s %-12s %-14s %s' "$mode" "$n" "$(gpus $n)" "$diff" "$copy" "$step")")
  done
done

# Broken modes race for real: give them kernels long enough to lose the race against
# (2^22 cells per device) and a pulse that reaches the device boundary at once.
race=race   # the built-in scenario: 2^23 cells on 2 devices, a pulse at their boundary
broken=()
broken_modes=$([ "${BROKEN:-1}" = 0 ] || modes_where "not m['correct'] and not m['fails']")
for mode in $broken_modes; do
  # pulse: the wave reaches the device boundary (cell 1000) near step 560.
  for case in "pulse 800" "$race 300"; do
    read -r scenario n_steps <<< "$case"
    seen=""
    for r in 1 2 3 4 5; do
      json=$(run --headless --runtime cuda --gpus "$(gpus 2)" --scenario "$scenario" --mode $mode --steps "$n_steps" \
             --check-every 5 --json) || json='{}'
      seen+="$(echo "$json" | field "['diverged_by_step']" 2>/dev/null || echo ERR) "
    done
    label=$([ "$scenario" = pulse ] && echo pulse || echo race)
    broken+=("$(printf '%-20s %-8s %s' "$mode" "$label" "$seen")")
  done
done
cross_out=$("$bin" --headless --runtime cuda --gpus "$(gpus 2)" --mode cross-device-record --steps 10 2>&1)
cross_rc=$?
cross=$(echo "$cross_out" | tail -n 1)

here=$(cd "$(dirname "$0")" && pwd)
plane=()
plane_steps=$((steps / 5))
for scenario in radiate "$here"/scenarios/plane-*.toml; do
  for mode in ${PLANE_MODES:-fused fused-push fused-flags fused-overlap fused-p2p}; do
    for n in 1 2 4; do
      json=$(run --headless --runtime cuda --gpus "$(gpus $n)" --scenario "$scenario" --mode $mode \
             --steps "$plane_steps" --json) || json='{}'
      diff=$(echo "$json" | field "['max_abs_diff']" 2>/dev/null || echo FAILED)
      step=$(echo "$json" | field "['measured_step_us']" 2>/dev/null || echo -)
      plane+=("$(printf '%-20s %-16s %-3s %-12s %s' "$(basename "$scenario" .toml)" "$mode" "$n" "$diff" "$step")")
    done
  done
done

sanitizer=()
if command -v compute-sanitizer >/dev/null; then
  for scenario in "$here"/scenarios/plane-pec-hard.toml "$here"/scenarios/plane-narrow.toml; do
    for tool in racecheck memcheck; do
      res=$(compute-sanitizer --tool $tool "$bin" --headless --runtime cuda --gpus "$(gpus 2)" \
            --scenario "$scenario" --mode fused --steps 48 2>&1 | tee -a "$log" |
            grep -E "(ERROR|RACECHECK) SUMMARY" | tail -n 1)
      sanitizer+=("$(printf '%-10s %-10s %s' "$tool" "$(basename "$scenario" .toml)" "${res:-no summary}")")
    done
  done
  for tool in memcheck initcheck; do
    for mode in $correct_modes; do
      res=$(compute-sanitizer --tool $tool "$bin" --headless --runtime cuda --gpus "$(gpus 2)" --mode $mode \
            --steps 50 2>&1 | tee -a "$log" | grep -E "ERROR SUMMARY" | tail -n 1)
      sanitizer+=("$(printf '%-10s %-10s %s' "$tool" "$mode" "${res:-no summary}")")
    done
  done
fi

trace=$(bash "$(dirname "$0")/gpu-trace-check.sh" "$bin" "$(gpus 2)")
echo
echo "== haloscope GPU check: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1), $ngpu GPU(s), $steps steps"
printf '%-20s %-3s %-16s %-12s %-14s %s\n' "correct mode" "N" "--gpus" "max |Δ|" "copy µs (med)" "µs/step"
printf '%s\n' "${rows[@]}"
echo "(reference peer-copy latency, GPU.md: 7.3 µs; max |Δ| must be 0.0)"
echo
printf '%-20s %-8s %s\n' "broken mode" "scenario" "first divergence step in 5 runs (pulse: 800 steps, race: 300; checked every 5; - = none)"
printf '%s\n' "${broken[@]}"
printf '%-20s %s\n' "cross-device-record" "exit $cross_rc: $cross"
echo
printf '%-20s %-16s %-3s %-12s %s\n' "2D scenario" "mode" "N" "max |Δ|" "µs/step"
printf '%s\n' "${plane[@]}"
echo "($plane_steps steps each; max |Δ| must be 0.0)"
echo
[ ${#sanitizer[@]} -gt 0 ] && printf '%s\n' "${sanitizer[@]}"
echo "--trace on the GPU: $trace"
