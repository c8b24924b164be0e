#!/bin/bash
# Builds NVIDIA's multi-threaded Jacobi variants in gpu/mt/ (run from gpu/, by host-sync.sh and
# footprints.sh), changed in this copy so that several OpenMP threads share the one GPU:
# THREADS=N threads, thread t drives GPU t mod the GPU count, no peer access asked of a GPU
# to itself (once: a second run finds it changed). With `broken`, each also as broken/ with its
# first wait on the top neighbour's event removed: the compute stream's (copy, p2p, p2p_opt),
# the top push stream's (copy_overlap, whose compute stream waits only on its own device).
for v in mt/*/; do v=${v%/}; (
  cd $v && { grep -q real_devices jacobi.cu || sed -i \
    -e 's/CUDA_RT_CALL(cudaGetDeviceCount(&num_devices));/CUDA_RT_CALL(cudaGetDeviceCount(\&num_devices)); const int real_devices = num_devices; if (getenv("THREADS")) num_devices = atoi(getenv("THREADS"));/' \
    -e 's/cudaSetDevice(dev_id)/cudaSetDevice(dev_id % real_devices)/' \
    -e 's/CUDA_RT_CALL(cudaDeviceCanAccessPeer(&canAccessPeer, dev_id, \(top\|bottom\)));/canAccessPeer = 1;/' \
    -e 's/CUDA_RT_CALL(cudaDeviceEnablePeerAccess(\(top\|bottom\), 0));/;/' jacobi.cu; } &&
  nvcc -DHAVE_CUB -Xcompiler -fopenmp -lineinfo -DUSE_NVTX -ldl -arch=sm_90 -std=c++17 jacobi.cu -o jacobi > build.log 2>&1 ||
  echo "BUILD FAIL $v: $(tail -3 build.log)"
  [ "$1" = broken ] || exit 0
  mkdir -p broken && awk 'BEGIN{d=0} /cudaStreamWaitEvent\((compute_stream, (push_bottom_done|compute_done)|push_top_stream, push_bottom_done)/ && !d && /top\]|\[top/ {print (/CUDA_RT_CALL\(/ ? "/* removed */;" : "cudaSuccess); /* removed */"); d=1; next} {print}' jacobi.cu > broken/jacobi.cu &&
  grep -c "removed" broken/jacobi.cu > broken/removed.txt &&
  (cd broken && nvcc -DHAVE_CUB -Xcompiler -fopenmp -lineinfo -DUSE_NVTX -ldl -arch=sm_90 -std=c++17 jacobi.cu -o jacobi > build.log 2>&1 ||
   echo "BUILD FAIL $v/broken: $(tail -3 build.log)") ) &
done
wait
