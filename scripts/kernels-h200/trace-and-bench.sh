#!/usr/bin/env bash
# Issue 37: the traced-run check of the GPU suite (scripts/gpu-check.sh, step 6), then the
# bench (benchmarks/2026-12-04-h200x1-in-turn.txt). Beside the built binary, as run.sh:
#
#   mkdir -p gpu && cp target/release/haloscope gpu/
#   cp scripts/kernels-h200/trace-and-bench.sh gpu/ && bash gpu/trace-and-bench.sh
set -uo pipefail
cd "$(dirname "$0")"
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
out=${OUT:-/tmp}
trace_json=$out/gpu-check-trace.json
./haloscope --headless --runtime cuda --gpus 0,0 --scenario radiate --mode fused-overlap --steps 96 \
  --trace "$trace_json" --trace-steps 32..64 --json 2>>$out/err.log | python3 -c "
import json, sys
s = json.load(sys.stdin); ev = json.load(open('$trace_json'))
x = [e for e in ev if e.get('ph') == 'X' and e['cat'] in ('kernel', 'copy')]
steps = sorted({e['args']['step'] for e in x})
timed = all(e['dur'] > 0 for e in x)
ok = steps == [32, 48] and timed and len(x) > 0 and s['max_abs_diff'] == 0.0
print(('ok' if ok else 'FAILED') + f': rounds {steps}, {len(x)} kernels and copies, all timed {timed}, max |Δ| {s[\"max_abs_diff\"]}')
" 2>&1 | tail -n 1
rm -f "$trace_json"
./haloscope bench --runtime cuda --gpus 0 --seconds 0.1 > "$out/bench.txt" 2> "$out/bench.err"
sed -n '/== fused modes by/,$p' "$out/bench.txt"
