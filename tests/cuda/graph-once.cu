// A graph captured once and launched every step, as production codes use them: the capture
// forks from stream `main` to stream `side` (a record and a wait) and joins back; `side`
// fills `b` from `a` while `main` fills `c`. After each launch a copy on a third stream,
// `out`, reads `b`. Correct (the default), `out` waits on an event recorded on `main` after
// the launch; `./graph-once STEPS broken` leaves that wait out, so the copy races the graph's
// kernel on `side` (its next launch's too). haloscope's checker must see the graph's kernels
// at each cudaGraphLaunch, not at the capture: the capture runs nothing. Each step is an NVTX
// range named "step", so findings say their step.
//
// Build: nvcc -O3 -arch=sm_90 graph-once.cu -o graph-once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#define CHECK(x)                                                                                 \
    do {                                                                                         \
        cudaError_t e_ = (x);                                                                    \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));   \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

__global__ void scale(float *to, const float *from, int n, float k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) to[i] = k * from[i] + 1.0f;
}

int main(int argc, char **argv) {
    const int steps = argc > 1 ? atoi(argv[1]) : 100;
    const bool broken = argc > 2 && strcmp(argv[2], "broken") == 0;
    const int n = 1 << 16;
    float *a, *b, *c, *copy;
    CHECK(cudaMalloc(&a, n * sizeof(float)));
    CHECK(cudaMalloc(&b, n * sizeof(float)));
    CHECK(cudaMalloc(&c, n * sizeof(float)));
    CHECK(cudaMalloc(&copy, n * sizeof(float)));
    CHECK(cudaMemset(a, 0, n * sizeof(float)));
    // cudaMemset runs on the legacy stream, which the non-blocking streams below do not
    // follow: the host waits for it.
    CHECK(cudaDeviceSynchronize());
    cudaStream_t main_s, side, out;
    CHECK(cudaStreamCreateWithFlags(&main_s, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&out, cudaStreamNonBlocking));
    cudaEvent_t fork, join, done;
    CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));

    cudaGraph_t graph;
    CHECK(cudaStreamBeginCapture(main_s, cudaStreamCaptureModeGlobal));
    CHECK(cudaEventRecord(fork, main_s));
    CHECK(cudaStreamWaitEvent(side, fork, 0));
    scale<<<n / 256, 256, 0, side>>>(b, a, n, 0.5f);
    scale<<<n / 256, 256, 0, main_s>>>(c, a, n, 2.0f);
    CHECK(cudaEventRecord(join, side));
    CHECK(cudaStreamWaitEvent(main_s, join, 0));
    CHECK(cudaStreamEndCapture(main_s, &graph));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));

    for (int s = 0; s < steps; s++) {
        nvtxRangePushA("step");  // haloscope numbers each finding's step by these
        CHECK(cudaGraphLaunch(exec, main_s));
        if (!broken) {
            CHECK(cudaEventRecord(done, main_s));
            CHECK(cudaStreamWaitEvent(out, done, 0));
        }
        CHECK(cudaMemcpyAsync(copy, b, n * sizeof(float), cudaMemcpyDeviceToDevice, out));
        // The next launch overwrites b: it waits for the copy.
        CHECK(cudaEventRecord(done, out));
        CHECK(cudaStreamWaitEvent(main_s, done, 0));
        nvtxRangePop();
    }
    CHECK(cudaDeviceSynchronize());
    float h;
    CHECK(cudaMemcpy(&h, copy + 7, sizeof h, cudaMemcpyDeviceToHost));
    printf("graph-once: %d launches, copy[7] = %g\n", steps, h);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    return 0;
}
