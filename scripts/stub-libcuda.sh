#!/usr/bin/env bash
# Builds a stub libcuda.so (soname libcuda.so.1) exporting every driver symbol that cust's
# raw bindings declare, so `cargo build --features cuda` links on a machine without CUDA.
# A binary built against it runs only where the real driver's libcuda.so.1 is installed.
#
# usage: scripts/stub-libcuda.sh DIR      then: CUDA_LIBRARY_PATH=DIR cargo build --features cuda
# (cust's build script looks for DIR/lib64; the stub goes there.)
set -euo pipefail
out=${1:?usage: $0 DIR}/lib64
mkdir -p "$out"
cd "$(dirname "$0")/.."
cargo fetch --quiet
registry=${CARGO_HOME:-$HOME/.cargo}/registry/src
bindings=$(ls -d "$registry"/*/cust_raw-0.11.*/src/cuda.rs 2>/dev/null | head -n 1)
if [ -z "$bindings" ]; then
  echo "stub-libcuda: cust_raw's src/cuda.rs not found under $registry" >&2
  exit 1
fi
# Every `pub fn cuXxx(` of the bindings becomes an empty function: only the names matter.
# haloscope's own declarations (src/runtime/cuda/sys.rs) are added, in case they name
# newer entry points than cust's bindings.
{ grep -oE 'pub fn cu[A-Za-z0-9_]+' "$bindings" | awk '{print $3}'
  grep -oE 'fn cu[A-Za-z0-9_]+' src/runtime/cuda/sys.rs | awk '{print $2}'; } | sort -u |
  awk '{print "void " $1 "(void) {}"}' > "$out/libcuda_stub.c"
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$out/libcuda.so" "$out/libcuda_stub.c"
echo "stub-libcuda: $(wc -l < "$out/libcuda_stub.c") symbols in $out/libcuda.so"
