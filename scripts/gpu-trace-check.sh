#!/usr/bin/env bash
# --trace on the GPU (the GPU suite's step 6): fused-overlap on radiate over GPUS, steps
# 32..64 kept. Prints one line: ok when the file is valid JSON holding only the rounds of
# those steps (32 and 48), every kernel and copy timed (a slice that lasts), bits 0.
#
#   scripts/gpu-trace-check.sh [BINARY] [GPUS]
set -uo pipefail
bin=${1:-./haloscope}
gpus=${2:-0,0}
trace_json=${OUT:-/tmp}/gpu-trace-check.json
"$bin" --headless --runtime cuda --gpus "$gpus" --scenario radiate --mode fused-overlap --steps 96 \
  --trace "$trace_json" --trace-steps 32..64 --json 2>> "${OUT:-/tmp}/gpu-trace-check.err" | python3 -c "
import json, sys
s = json.load(sys.stdin); ev = json.load(open('$trace_json'))
x = [e for e in ev if e.get('ph') == 'X' and e['cat'] in ('kernel', 'copy')]
steps = sorted({e['args']['step'] for e in x})
timed = all(e['dur'] > 0 for e in x)
ok = steps == [32, 48] and timed and len(x) > 0 and s['max_abs_diff'] == 0.0
print(('ok' if ok else 'FAILED') + f': rounds {steps}, {len(x)} kernels and copies, all timed {timed}, max |Δ| {s[\"max_abs_diff\"]}')
" 2>&1 | tail -n 1
rm -f "$trace_json"
