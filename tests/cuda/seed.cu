// The seed: the answer that circulates on Q&A sites to "move dev_Ex[tid] to GPU tid+1 with
// cudaMemcpyPeerAsync and events", written out faithfully as a whole program (haloscope's
// exercise 7 is the same code in its own language). One OpenMP host thread per GPU through
// a gpuMapping; each step a kernel on the thread's stream, then the boundary cell sent on:
// the event created on the *target* GPU, recorded on the *source* GPU's stream and destroyed
// right after; the neighbour's stream waits on whatever that event holds when its thread
// gets there (recorded yet or not); one barrier, at the end. No call is checked, as in the
// original. gpuMapping is all 0 so that it runs on one GPU: there the record on "another
// device's" stream is legal, and the races are real all the same — the checksum it prints
// changes from run to run. tests/cuda/seed-fixed.cu is the corrected program.
//
// Build: nvcc -O3 -arch=sm_90 -Xcompiler -fopenmp seed.cu -o seed     Run: ./seed [STEPS [CELLS]]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <omp.h>

#include <vector>

#define N 2            // host threads, one per (logical) GPU
#define CELLS 4096     // cells per GPU, halo cell 0 included (./seed STEPS CELLS changes it)
#define STEPS 2000

static int gpuMapping[N] = {0, 0};
static float *dev_Ex[N][2];      // each GPU's field, two buffers: step s reads [s%2], writes [(s+1)%2]
static cudaEvent_t events[N];

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
            relax<<<(cells + 255) / 256, 256, 0, stream>>>(out, in, cells, s);
            if (tid < N - 1) {
                cudaSetDevice(gpuMapping[tid + 1]);
                cudaEventCreate(&events[tid]);           // on the target GPU
                cudaSetDevice(gpuMapping[tid]);
                cudaEventRecord(events[tid], stream);    // on the source GPU's stream
                cudaEventDestroy(events[tid]);           // right after recording it
            }
            if (tid > 0) {
                cudaStreamWaitEvent(stream, events[tid - 1], 0);   // whatever it holds now
                cudaMemcpyPeerAsync(out, gpuMapping[tid], dev_Ex[tid - 1][(s + 1) % 2] + cells - 2,
                                    gpuMapping[tid - 1], sizeof(float), stream);
            }
        }
        cudaStreamSynchronize(stream);
#pragma omp barrier
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
