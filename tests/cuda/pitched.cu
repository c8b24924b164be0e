// Pitched memory, 2D copies and stream-ordered allocations, as image and stencil codes use
// them: `field` is a pitched 2D array (cudaMallocPitch); each step a kernel on stream `a`
// updates it, then stream `b` copies its last row into `row` with cudaMemcpy2DAsync (a
// column of one row) and a scratch buffer comes and goes with cudaMallocAsync/cudaFreeAsync.
// Correct (the default), `b` waits on an event recorded after the kernel; `./pitched STEPS
// broken` leaves that wait out: the 2D copy races the kernel.
//
// Build: nvcc -O3 -arch=sm_90 pitched.cu -o pitched
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#define CHECK(x)                                                                                 \
    do {                                                                                         \
        cudaError_t e_ = (x);                                                                    \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));   \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

__global__ void smooth(float *field, size_t pitch, int w, int h, int step) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h) {
        float *row = (float *)((char *)field + y * pitch);
        row[x] = 0.5f * row[x] + (x == w / 2 ? 1.0f / (1 + step) : 0.0f);
    }
}

int main(int argc, char **argv) {
    const int steps = argc > 1 ? atoi(argv[1]) : 10;
    const bool broken = argc > 2 && strcmp(argv[2], "broken") == 0;
    const int w = 1000, h = 64;
    float *field, *row;
    size_t pitch;
    CHECK(cudaMallocPitch(&field, &pitch, w * sizeof(float), h));
    CHECK(cudaMalloc(&row, w * sizeof(float)));
    cudaStream_t a, b;
    CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    CHECK(cudaMemset2DAsync(field, pitch, 0, w * sizeof(float), h, a));
    cudaEvent_t updated, copied;
    CHECK(cudaEventCreateWithFlags(&updated, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    for (int s = 0; s < steps; s++) {
        smooth<<<dim3((w + 255) / 256, h), 256, 0, a>>>(field, pitch, w, h, s);
        float *scratch;
        CHECK(cudaMallocAsync(&scratch, w * sizeof(float), a));
        CHECK(cudaMemsetAsync(scratch, 0, w * sizeof(float), a));
        CHECK(cudaFreeAsync(scratch, a));
        CHECK(cudaEventRecord(updated, a));
        if (!broken) CHECK(cudaStreamWaitEvent(b, updated, 0));
        CHECK(cudaMemcpy2DAsync(row, w * sizeof(float), (char *)field + (h - 1) * pitch, pitch, w * sizeof(float),
                                1, cudaMemcpyDeviceToDevice, b));
        CHECK(cudaEventRecord(copied, b));
        CHECK(cudaStreamWaitEvent(a, copied, 0));
    }
    CHECK(cudaDeviceSynchronize());
    float v;
    CHECK(cudaMemcpy(&v, row + w / 2, sizeof v, cudaMemcpyDeviceToHost));
    printf("pitched: %d steps, pitch %zu, row[%d] = %g\n", steps, pitch, w / 2, v);
    return 0;
}
