#!/usr/bin/env bash
# Installs nvcc 13.0 from PyPI wheels (about 100 MB) into DIR and prints the nvcc path.
# Driver 580 refuses PTX from a newer nvcc: the versions are pinned.
#
# usage: scripts/install-nvcc.sh DIR       then: NVCC=$(scripts/install-nvcc.sh DIR) cargo build --features cuda
set -euo pipefail
dir=${1:?usage: $0 DIR}
nvcc="$dir/nvidia/cu13/bin/nvcc"
if [ ! -x "$nvcc" ]; then
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dir" \
    nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 >&2
fi
"$nvcc" --version >&2
echo "$nvcc"
