#!/usr/bin/env bash
# The fused kernels at the limit of one GPU (issue 37): bits of every fused mode on the 1D
# and 2D check scenarios, compute-sanitizer, ncu's figures, then the bench. Runs on a GPU
# machine with only the built binary beside it:
#
#   cargo build --release --features cuda
#   mkdir -p gpu && cp target/release/haloscope scripts/kernels-h200/*.toml scripts/scenarios/*.toml gpu/
#   cp scripts/kernels-h200/run.sh gpu/ && (on the GPU machine) bash gpu/run.sh
#
# Writes under $OUT (default /tmp): bits.txt, sanitizer.txt, ncu1d.txt, ncu2d.txt,
# bench.txt; prints the tables last. benchmarks/2026-12-04-h200x1-kernels*.txt came from it.
set -uo pipefail
cd "$(dirname "$0")"
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
bin=./haloscope
out=${OUT:-/tmp}
log=$out/run.log
: > "$log"
field() { python3 -c "import json,sys; d=json.load(sys.stdin); v=d$1; print('-' if v is None else v)"; }
modes="fused fused-push fused-flags fused-overlap fused-p2p"
bits() { # scenario steps device-lists...
  local scen=$1 steps=$2 mode gpus json d
  shift 2
  for mode in $modes; do
    for gpus in "$@"; do
      json=$($bin --headless --runtime cuda --gpus "$gpus" --scenario "$scen" --mode $mode --steps "$steps" --json 2>>"$log") || json='{}'
      d=$(echo "$json" | field "['max_abs_diff']" 2>/dev/null || echo FAILED)
      printf '%-20s %-14s %-8s %s\n' "$scen" $mode "$gpus" "$d"
    done
  done
}
{
  for scen in pulse fresnel cavity uneven line-edges.toml; do bits $scen 700 0 0,0 0,0,0,0; done
  bits race 120 0 0,0
  bits plane-wide.toml 900 0 0,0 0,0,0,0
  for scen in radiate plane-pec-hard.toml plane-narrow.toml plane-periodic.toml; do bits $scen 600 0 0,0,0,0; done
} > "$out/bits.txt"
san() { # tool mode scenario steps what
  local res
  res=$(compute-sanitizer --tool "$1" $bin --headless --runtime cuda --gpus 0,0 --scenario "$3" --mode "$2" --steps "$4" 2>&1 |
        tee -a "$log" | grep -E "(ERROR|RACECHECK) SUMMARY" | tail -n 1)
  printf '%-10s %-16s %-16s %s\n' "$1" "$5" "$2" "${res:-no summary}"
}
{
  for tool in racecheck memcheck; do
    san $tool fused-p2p line-edges.toml 48 fused_steps
    san $tool fused-overlap line-edges.toml 48 fused_steps
    san $tool fused plane-wide.toml 32 fused_steps_2d
  done
} > "$out/sanitizer.txt"
M=dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed
M=$M,sm__warps_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum
M=$M,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
M=$M,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum,launch__registers_per_thread
ncu --clock-control none --kernel-name fused_steps --launch-skip 3 --launch-count 1 --metrics $M \
  $bin --headless --runtime cuda --gpus 0 --scenario big.toml --mode fused --steps 96 --no-reference > "$out/ncu1d.txt" 2>&1
ncu --clock-control none --kernel-name fused_steps_2d --launch-skip 4 --launch-count 1 --metrics $M \
  $bin --headless --runtime cuda --gpus 0 --scenario big2d.toml --mode fused --steps 32 --no-reference > "$out/ncu2d.txt" 2>&1
$bin bench --runtime cuda --gpus 0 --seconds 0.1 > "$out/bench.txt" 2> "$out/bench.err"

echo "== bench (the fused sections)"; sed -n '/== fused kernel/,$p' "$out/bench.txt"
echo "== bits: runs whose max |Δ| is not 0.0 (of $(wc -l < "$out/bits.txt"))"; grep -v " 0.0$" "$out/bits.txt"
echo "== sanitizers"; cat "$out/sanitizer.txt"
for k in 1d 2d; do
  echo "== ncu $k"; grep -E "dram__|sm__|l1tex__|gpu__time|smsp__|launch__" "$out/ncu$k.txt"
done
