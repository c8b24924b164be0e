#!/usr/bin/env bash
# The 2D split pass's last check and the bench (issue 37): bits of the split modes on the
# 2D check scenarios (and a 1D one), then `bench --runtime cuda --gpus 0`, whose last
# section measures what fused-overlap hides on two devices of the GPU. The bench runs only
# when every run's bits are the CPU's. Beside the built binary, as run.sh:
#
#   mkdir -p gpu && cp target/release/haloscope scripts/scenarios/*.toml gpu/
#   cp scripts/kernels-h200/split2d-final.sh gpu/ && bash gpu/split2d-final.sh
set -uo pipefail
cd "$(dirname "$0")"
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
out=${OUT:-/tmp}
field() { python3 -c "import json,sys; d=json.load(sys.stdin); v=d$1; print('-' if v is None else v)"; }
for c in "plane-wide.toml fused-overlap 0,0" "radiate fused-overlap 0,0,0,0" \
         "plane-periodic.toml fused-overlap 0,0" "plane-wide.toml fused-p2p 0,0,0,0" \
         "line-edges.toml fused-overlap 0,0" "pulse fused-overlap 0,0,0,0"; do
  set -- $c
  d=$(./haloscope --headless --runtime cuda --gpus $3 --scenario $1 --mode $2 --steps 400 --json 2>>"$out/err.log" |
      field "['max_abs_diff']" 2>/dev/null || echo FAILED)
  printf '%-20s %-14s %-8s %s\n' $1 $2 $3 "$d"
done | tee "$out/bits-final.txt"
if grep -qv " 0.0$" "$out/bits-final.txt"; then
  echo "bits differ: no bench"; exit 1
fi
./haloscope bench --runtime cuda --gpus 0 --seconds 0.1 > "$out/bench.txt" 2> "$out/bench.err"
sed -n '/== fused kernel/,$p' "$out/bench.txt"
