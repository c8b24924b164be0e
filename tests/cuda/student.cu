// The program most students write first for a halo exchange between host threads (issue 54):
// each OpenMP thread owns a slab of a 1D rod on its own stream; a step is a kernel over the
// slab, cudaStreamSynchronize, `#pragma omp barrier`, then each thread copies its
// neighbours' edge cells into its own halo cells, synchronises, and meets them at a second
// barrier. Correct: the barrier after the synchronisation orders every slab's kernel before
// the neighbours' copies of its edges. `broken` leaves the first barrier out: a neighbour may
// copy an edge while the kernel that writes it still runs. `nosync` keeps the barrier but
// leaves out the synchronisation before it: the threads meet while the kernel may still run
// (the check names the barrier that orders the threads but not the GPU).
//
//   nvcc -O3 -arch=sm_90 -Xcompiler -fopenmp student.cu -o student
//   ./student [STEPS] [broken|nosync]        (2 threads on GPU 0; THREADS=N for more)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <omp.h>

#define CHECK(x)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (x);                                                                 \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));       \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

// One smoothing step over the slab's own cells [1, n]: cells 0 and n + 1 are the halo.
__global__ void smooth(const float *in, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x + 1;
    if (i <= n) out[i] = 0.25f * in[i - 1] + 0.5f * in[i] + 0.25f * in[i + 1];
}

int main(int argc, char **argv) {
    const int steps = argc > 1 ? atoi(argv[1]) : 20;
    const bool broken = argc > 2 && strcmp(argv[2], "broken") == 0;
    const bool nosync = argc > 2 && strcmp(argv[2], "nosync") == 0;
    const int threads = getenv("THREADS") ? atoi(getenv("THREADS")) : 2;
    const int n = 1 << 20;
    float *a[64], *b[64];
    double sum = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sum)
    {
        const int t = omp_get_thread_num();
        const int up = (t + threads - 1) % threads, down = (t + 1) % threads;
        CHECK(cudaSetDevice(0));
        cudaStream_t s;
        CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        CHECK(cudaMalloc(&a[t], (n + 2) * sizeof(float)));
        CHECK(cudaMalloc(&b[t], (n + 2) * sizeof(float)));
        CHECK(cudaMemsetAsync(a[t], 0, (n + 2) * sizeof(float), s));
        CHECK(cudaMemsetAsync(b[t], 0, (n + 2) * sizeof(float), s));
        float one = 1.0f;
        if (t == 0) CHECK(cudaMemcpyAsync(a[t] + n / 2, &one, sizeof one, cudaMemcpyHostToDevice, s));
        CHECK(cudaStreamSynchronize(s));
#pragma omp barrier
        for (int k = 0; k < steps; k++) {
            float *in = k % 2 ? b[t] : a[t], *out = k % 2 ? a[t] : b[t];
            smooth<<<(n + 255) / 256, 256, 0, s>>>(in, out, n);
            if (!nosync) CHECK(cudaStreamSynchronize(s));
            if (!broken) {
#pragma omp barrier
            }
            // The neighbours' edges into this slab's halo: up's last cell, down's first.
            float *up_out = k % 2 ? a[up] : b[up], *down_out = k % 2 ? a[down] : b[down];
            CHECK(cudaMemcpyAsync(out, up_out + n, sizeof(float), cudaMemcpyDeviceToDevice, s));
            CHECK(cudaMemcpyAsync(out + n + 1, down_out + 1, sizeof(float), cudaMemcpyDeviceToDevice, s));
            CHECK(cudaStreamSynchronize(s));
#pragma omp barrier
        }
        float edge = 0;
        CHECK(cudaMemcpy(&edge, (steps % 2 ? b[t] : a[t]) + 1, sizeof edge, cudaMemcpyDeviceToHost));
        sum += edge;
#pragma omp barrier
        CHECK(cudaFree(a[t]));
        CHECK(cudaFree(b[t]));
        CHECK(cudaStreamDestroy(s));
    }
    printf("student: %d threads, %d steps%s: edge sum %g\n", threads, steps, broken ? " (broken)" : nosync ? " (nosync)" : "", sum);
    return 0;
}
