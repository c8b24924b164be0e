#!/usr/bin/env bash
# The 2D split pass on one GPU (issue 37): bits of the split modes on the 2D check
# scenarios, compute-sanitizer on them, and what fused-overlap hides of the exchange on two
# devices of the GPU (headless runs: fused, fused-overlap, and noexchange.halo, the bench's
# "no exchange" row as a file). Runs beside the built binary, as run.sh:
#
#   mkdir -p gpu && cp target/release/haloscope scripts/scenarios/*.toml scripts/kernels-h200/*.toml gpu/
#   cp scripts/kernels-h200/split2d.sh scripts/kernels-h200/noexchange.halo gpu/ && bash gpu/split2d.sh
set -uo pipefail
cd "$(dirname "$0")"
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
bin=./haloscope
out=${OUT:-/tmp}
log=$out/split2d.log
: > "$log"
field() { python3 -c "import json,sys; d=json.load(sys.stdin); v=d$1; print('-' if v is None else v)"; }
run() { # scenario mode gpus steps [extra...] -> the JSON
  local scen=$1 mode=$2 gpus=$3 steps=$4
  shift 4
  local what="--mode $mode"
  [[ $mode == *.halo ]] && what="--program $mode"
  $bin --headless --runtime cuda --gpus "$gpus" --scenario "$scen" $what --steps "$steps" --json "$@" 2>>"$log" || echo '{}'
}
{
  for scen in plane-wide.toml radiate plane-pec-hard.toml plane-narrow.toml plane-periodic.toml; do
    for mode in fused-overlap fused-p2p fused; do
      for gpus in 0 0,0 0,0,0,0; do
        d=$(run $scen $mode $gpus 600 | field "['max_abs_diff']" 2>/dev/null || echo FAILED)
        printf '%-20s %-14s %-8s %s\n' "$scen" $mode "$gpus" "$d"
      done
    done
  done
  for mode in fused-overlap fused-p2p; do
    d=$(run line-edges.toml $mode 0,0 700 | field "['max_abs_diff']" 2>/dev/null || echo FAILED)
    printf '%-20s %-14s %-8s %s\n' line-edges.toml $mode 0,0 "$d"
  done
} > "$out/bits.txt"
san() { # tool mode
  local res
  res=$(compute-sanitizer --tool "$1" $bin --headless --runtime cuda --gpus 0,0 --scenario plane-wide.toml --mode "$2" --steps 32 2>&1 |
        tee -a "$log" | grep -E "(ERROR|RACECHECK) SUMMARY" | tail -n 1)
  printf '%-10s %-16s %s\n' "$1" "$2" "${res:-no summary}"
}
{
  for tool in memcheck racecheck; do
    for mode in fused-overlap fused-p2p; do san $tool $mode; done
  done
} > "$out/sanitizer.txt"
{
  printf '%-7s %-16s %s\n' size program "µs/step (3 runs)"
  for n in 4096 16384; do
    steps=$(( n == 4096 ? 4800 : 480 ))
    for p in fused fused-overlap noexchange.halo; do
      t=""
      for r in 1 2 3; do
        t="$t $(run p$n.toml $p 0,0 $steps --no-reference | field "['measured_step_us']" 2>/dev/null || echo FAILED)"
      done
      printf '%-7s %-16s %s\n' "$n" "$p" "$t"
    done
  done
} > "$out/hiding.txt"
echo "== bits: runs whose max |Δ| is not 0.0 (of $(wc -l < "$out/bits.txt"))"; grep -v " 0.0$" "$out/bits.txt"
echo "== sanitizers"; cat "$out/sanitizer.txt"
echo "== hiding (two devices of GPU 0)"; cat "$out/hiding.txt"
