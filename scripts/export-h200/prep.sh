#!/usr/bin/env bash
# Prepares gpu/ (git-ignored) for the export check on an H200 (scripts/export-h200/run.sh):
# every correct and broken non-NCCL mode exported for pulse (4 devices), uneven (7) and
# radiate (2D, 4), all on GPU 0; haloscope's own fields (the sim's, bit-identical to the
# cuda runtime's) for each scenario and step count; short exports for compute-sanitizer.
# Run from the repository root after `cargo build --release --features cuda`.
set -euo pipefail
H=${H:-target/release/haloscope}
rm -rf gpu && mkdir -p gpu/work/refs
cp "$H" gpu/haloscope-new
cp scripts/export-h200/run.sh scripts/export-h200/compare.py gpu/
MODES="events host-sync overlap push wide-halo graph graph-push graph-flags fused fused-push
fused-flags fused-overlap fused-p2p no-wait wait-before-record cross-device-record halo-overwrite
write-after-read"
for sd in pulse:4 uneven:7 radiate:4; do
  s=${sd%:*}; n=${sd#*:}
  g=$(printf '0,%.0s' $(seq "$n")); g=${g%,}
  for m in $MODES; do
    "$H" program export "$m" --cuda --out "gpu/work/exports/$s/$m" --scenario "$s" --gpus "$g" 2>/dev/null
  done
  for m in events wide-halo; do   # a round of 1 step and of 16: the two step counts
    d=gpu/work/tmp; rm -rf $d; mkdir -p $d
    "$H" --headless --scenario "$s" --mode "$m" --dump-fields $d --json > $d/summary.json 2>/dev/null
    st=$(python3 -c "import json;print(json.load(open('$d/summary.json'))['steps'])")
    mkdir -p "gpu/work/refs/$s/$st" && cp $d/*.npy "gpu/work/refs/$s/$st/"
  done
done
rm -rf gpu/work/tmp
for m in events fused-p2p; do
  "$H" program export $m --cuda --out gpu/work/exports/sanitize/$m --scenario pulse --steps 64 --gpus 0,0,0,0 2>/dev/null
done
(cd gpu/work && tar czf ../bundle.tgz exports refs) && rm -rf gpu/work
du -sh gpu/*
