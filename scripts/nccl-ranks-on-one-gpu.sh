#!/usr/bin/env bash
# NCCL across processes on a machine with ONE GPU: N ranks, all on GPU 0. NCCL refuses two
# ranks on one GPU of one host, so each rank claims a host of its own (NCCL_HOSTID) and
# NCCL joins them over sockets on loopback, as it would join nodes. Right for the order of
# calls and the bits; slow (milliseconds a step): not a measure of NVLink.
#
#   scripts/nccl-ranks-on-one-gpu.sh N [BINARY] -- [haloscope arguments]
#   e.g. scripts/nccl-ranks-on-one-gpu.sh 2 ./haloscope -- --headless --mode nccl --steps 2000
#        scripts/nccl-ranks-on-one-gpu.sh 3 ./haloscope -- --mode nccl-overlap   # the UI, rank 0
#
# Ranks 1..N-1 run in the background (their output in /tmp/haloscope-rank-R.log); rank 0
# runs in front with this terminal. Exits with rank 0's status.
set -uo pipefail
n=${1:?"the number of ranks"}
shift
bin=./haloscope
if [ "${1:-}" != "--" ] && [ $# -gt 0 ]; then
  bin=$1
  shift
fi
[ "${1:-}" = "--" ] && shift
port=$((29600 + RANDOM % 2000))
export NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0
export WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port
pids=()
for r in $(seq 1 $((n - 1))); do
  RANK=$r NCCL_HOSTID=haloscope-rank-$r "$bin" --runtime cuda --gpus 0 "$@" \
    >"/tmp/haloscope-rank-$r.log" 2>&1 &
  pids+=($!)
done
RANK=0 NCCL_HOSTID=haloscope-rank-0 "$bin" --runtime cuda --gpus 0 "$@"
rc=$?
for p in "${pids[@]}"; do
  wait "$p" || echo "rank (pid $p) ended with an error: see /tmp/haloscope-rank-*.log" >&2
done
exit $rc
