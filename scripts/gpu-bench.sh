#!/usr/bin/env bash
# Runs `haloscope bench --runtime cuda` on every visible GPU (or GPUS) and writes its JSON,
# with the date and the machine, where scripts/benchmarks-md.py reads it:
#
#   scripts/gpu-bench.sh [BINARY] [GPUS] [DIR]     e.g. scripts/gpu-bench.sh ./haloscope 0,1,2,3
#   BENCH_SECONDS=0.3 scripts/gpu-bench.sh ...     seconds per measurement (default 0.5)
#   BENCH_MODES=graph,fused scripts/gpu-bench.sh ...  only these modes' rows (a partial run)
#
# DIR defaults to $OUT or benchmarks/. Then, in the repository: copy the file into
# benchmarks/ and run `python3 scripts/benchmarks-md.py > BENCHMARKS.md`.
set -euo pipefail
bin=${1:-./haloscope}
ngpu=$(nvidia-smi -L | wc -l)
gpus=${2:-$(seq -s, 0 $((ngpu - 1)))}
dir=${3:-${OUT:-benchmarks}}
n=$(echo "$gpus" | tr ',' '\n' | wc -l)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)
short=$(echo "$name" | awk '{print tolower($NF)}')
out="$dir/$(date +%F)-${short}x$n${BENCH_MODES:+-$(echo "$BENCH_MODES" | tr ',' '-')}.json"
mkdir -p "$dir"
modes=${BENCH_MODES:+--modes $BENCH_MODES}
# shellcheck disable=SC2086 # $modes: empty, or two words
"$bin" bench --runtime cuda --gpus "$gpus" --seconds "${BENCH_SECONDS:-0.5}" $modes --json > "$out.bench"
python3 - "$out" "$name" "$driver" "$n" "$gpus" "${BENCH_MODES:-}" <<'PY'
import json, sys, datetime
out, name, driver, n, gpus, modes = sys.argv[1:]
bench = json.load(open(out + ".bench"))
json.dump({"date": datetime.date.today().isoformat(),
           "machine": f"{n} × {name}, driver {driver}",
           "command": f"haloscope bench --runtime cuda --gpus {gpus}" + (f" --modes {modes}" if modes else "") + " --json",
           "bench": bench}, open(out, "w"), indent=1, ensure_ascii=False)
PY
rm "$out.bench"
echo "gpu-bench: wrote $out"
