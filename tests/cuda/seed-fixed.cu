// The seed, corrected (tests/cuda/seed.cu is the original). Each thread's events are created
// once, on its own GPU, and recorded on its own stream; each step the boundary cell's
// producer records `sent`, the threads meet at a barrier, and only then does the neighbour's
// stream wait on it (so the wait binds to this step's record) and copy; the copy's end is
// recorded as `copied`, and the source's next kernel that overwrites the cell waits for it
// (write-after-read). The checksum is the same in every run.
//
// Build: nvcc -O3 -arch=sm_90 -Xcompiler -fopenmp seed-fixed.cu -o seed-fixed
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <omp.h>

#include <vector>

#define N 2
#define CELLS 4096     // cells per GPU (./seed-fixed STEPS CELLS changes it)
#define STEPS 2000

static int gpuMapping[N] = {0, 0};
static float *dev_Ex[N][2];
static cudaEvent_t sent[N], copied[N];

__global__ void relax(float *out, const float *in, int cells, int step) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= 1 && i < cells - 1) {
        float v = 0.5f * in[i] + 0.25f * (in[i - 1] + in[i + 1]);
        out[i] = i == cells / 2 ? v + 1.0f / (1 + step % 7) : v;
    }
    if (i == cells - 1) out[i] = in[i];
}

int main(int argc, char **argv) {
    const int steps = argc > 1 ? atoi(argv[1]) : STEPS;  // ./seed [STEPS [CELLS]]
    const int cells = argc > 2 ? atoi(argv[2]) : CELLS;
    for (int g = 0; g < N; g++) {
        cudaSetDevice(gpuMapping[g]);
        for (int b = 0; b < 2; b++) {
            cudaMalloc(&dev_Ex[g][b], cells * sizeof(float));
            cudaMemset(dev_Ex[g][b], 0, cells * sizeof(float));
        }
        cudaEventCreateWithFlags(&sent[g], cudaEventDisableTiming);
        cudaEventCreateWithFlags(&copied[g], cudaEventDisableTiming);
    }
    cudaDeviceSynchronize();
#pragma omp parallel num_threads(N)
    {
        int tid = omp_get_thread_num();
        cudaSetDevice(gpuMapping[tid]);
        cudaStream_t stream;
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        for (int s = 0; s < steps; s++) {
            float *in = dev_Ex[tid][s % 2], *out = dev_Ex[tid][(s + 1) % 2];
            // The cell the neighbour copied two steps ago is overwritten now: wait for the copy.
            if (tid < N - 1 && s > 0) cudaStreamWaitEvent(stream, copied[tid + 1], 0);
            relax<<<(cells + 255) / 256, 256, 0, stream>>>(out, in, cells, s);
            if (tid < N - 1) cudaEventRecord(sent[tid], stream);
#pragma omp barrier
            if (tid > 0) {
                cudaStreamWaitEvent(stream, sent[tid - 1], 0);
                cudaMemcpyPeerAsync(out, gpuMapping[tid], dev_Ex[tid - 1][(s + 1) % 2] + cells - 2,
                                    gpuMapping[tid - 1], sizeof(float), stream);
                cudaEventRecord(copied[tid], stream);
            }
#pragma omp barrier
        }
        cudaStreamSynchronize(stream);
    }
    std::vector<float> host(cells);
    unsigned sum = 0;
    for (int g = 0; g < N; g++) {
        cudaMemcpy(host.data(), dev_Ex[g][steps % 2], cells * sizeof(float), cudaMemcpyDeviceToHost);
        for (int i = 0; i < cells; i++) {
            unsigned u;
            memcpy(&u, &host[i], 4);
            sum = sum * 31 + u;
        }
    }
    printf("checksum %08x\n", sum);
    return 0;
}
