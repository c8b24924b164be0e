#!/usr/bin/env bash
# Issue 37: real-GPU traces (--trace on the cuda runtime) of fused-overlap, fused and the
# fused program without its exchange on two devices of one GPU, 4096² and 16384²; the
# GPU's spans of each run's pieces then come from spans-2d.py (run in the folder the
# traces are unpacked in). As measured for DESIGN.md ("The 2D split pass"):
#
#   mkdir -p gpu && cp target/release/haloscope scripts/scenarios/*.toml gpu/
#   cp scripts/kernels-h200/{trace-2d.sh,noexchange.halo,p4096.toml,p16384.toml} gpu/
#   KINDS=traced S4=6400 S16=6400 TL=960 bash gpu/trace-2d.sh   # then: tar xzf all.tgz; python3 spans-2d.py
#
# p4096.toml and p16384.toml: a Ricker source at the centre of an n² plane.
set -uo pipefail
cd "$(dirname "$0")"
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
./haloscope --headless --runtime cuda --gpus 0,0 --scenario plane-wide.toml --mode fused-overlap --steps 400 \
  --trace $out/small.json --trace-steps 100..140 --json > $out/small-summary.json 2>$out/small.err; echo "small rc $?"
for n in 4096 16384; do
  steps=$(( n == 4096 ? ${S4:-3200} : ${S16:-640} ))
  for p in fused-overlap fused noexchange.halo; do
    what="--mode $p"; [[ $p == *.halo ]] && what="--program $p"
    for t in ${KINDS:-traced plain}; do
      tr=""; [ $t = traced ] && tr="--trace $out/t-$n-${p%.halo}.json --trace-last ${TL:-320}"
      ./haloscope --headless --runtime cuda --gpus 0,0 --scenario p$n.toml $what --steps $steps --no-reference \
        $tr --json > $out/s-$t-$n-${p%.halo}.json 2>>$out/err.log || echo "FAILED $n $p $t"
      printf '%-6s %-16s %-7s %s\n' $n $p $t "$(python3 -c "import json;print(json.load(open('$out/s-$t-$n-${p%.halo}.json'))['measured_step_us'])" 2>/dev/null)"
    done
  done
done
(cd $out && tar czf /tmp/all.tgz . && rm -f * && mv /tmp/all.tgz .)
