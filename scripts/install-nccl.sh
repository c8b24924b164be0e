#!/usr/bin/env bash
# Installs NCCL's headers and library from PyPI (nvidia-nccl-cu13, about 200 MB) into DIR
# and prints NCCL's root (with include/ and lib/): what an exported NCCL program builds
# against. The export's compile test reads it as NCCL_HOME.
#
# usage: scripts/install-nccl.sh DIR       then: NCCL_HOME=$(scripts/install-nccl.sh DIR) …
set -euo pipefail
dir=${1:?usage: $0 DIR}
root="$dir/nvidia/nccl"
if [ ! -f "$root/include/nccl.h" ]; then
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dir" \
    nvidia-nccl-cu13==2.32.6 >&2
fi
echo "$root"
