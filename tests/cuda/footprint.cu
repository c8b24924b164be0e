// Kernel footprints on the GPU (issue 55): launches whose measured bytes `haloscope check
// --recording` must get right. One allocation `a` of N floats: a kernel writes its interior
// [1, N-1) while, on another stream and unordered, copies write its two edge elements — no
// race in the bytes, a race for a checker that takes the kernel as writing all of `a`.
// `./footprint race` copies into a[5] instead: the race, written-after-written, that the
// measured footprint must still name. Also: a kernel reading one column of a pitched array
// (strided: many ranges), and one reaching its arrays through a struct of two pointers
// (not a pointer argument: the "stray" accesses, charged to whole allocations).
//
// nvcc -O3 -arch=sm_90 footprint.cu -o footprint && ./footprint [race]
#include <cstdio>
#include <cstring>

#define CHECK(x)                                                                     \
    do {                                                                             \
        cudaError_t e_ = (x);                                                        \
        if (e_ != cudaSuccess) {                                                     \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            return 1;                                                                \
        }                                                                            \
    } while (0)

__global__ void interior(float *a, const float *b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x + 1;
    if (i < n - 1) a[i] = 0.5f * (b[i - 1] + b[i + 1]);
}

__global__ void column(float *out, const float *grid, size_t pitch_floats, int rows) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) out[r] = grid[r * pitch_floats];
}

struct Pair {
    const float *from;
    float *to;
};

__global__ void through(Pair p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p.to[i] = 2.0f * p.from[i];
}

int main(int argc, char **argv) {
    bool race = argc > 1 && strcmp(argv[1], "race") == 0;
    const int n = 1 << 20, rows = 256, pitch = 1024;
    float *a, *b, *grid, *out, *c;
    CHECK(cudaMalloc(&a, n * sizeof(float)));
    CHECK(cudaMalloc(&b, n * sizeof(float)));
    CHECK(cudaMalloc(&grid, rows * pitch * sizeof(float)));
    CHECK(cudaMalloc(&out, rows * sizeof(float)));
    CHECK(cudaMalloc(&c, n * sizeof(float)));
    CHECK(cudaMemset(a, 0, n * sizeof(float)));
    CHECK(cudaMemset(b, 0, n * sizeof(float)));
    CHECK(cudaMemset(grid, 0, rows * pitch * sizeof(float)));
    CHECK(cudaDeviceSynchronize());
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    static float edge[2] = {1.0f, 2.0f};
    for (int step = 0; step < 4; step++) {
        interior<<<(n + 255) / 256, 256, 0, s1>>>(a, b, n);
        // The edges, on the other stream, unordered with the kernel: disjoint bytes.
        CHECK(cudaMemcpyAsync(a, &edge[0], sizeof(float), cudaMemcpyHostToDevice, s2));
        CHECK(cudaMemcpyAsync(a + (race ? 5 : n - 1), &edge[1], sizeof(float), cudaMemcpyHostToDevice, s2));
        CHECK(cudaStreamSynchronize(s1));
        CHECK(cudaStreamSynchronize(s2));
    }
    // One column of the pitched grid read, while another stream writes its second column:
    // strided bytes that do not meet.
    column<<<1, rows, 0, s1>>>(out, grid, pitch, rows);
    CHECK(cudaMemcpy2DAsync(grid + 1, pitch * sizeof(float), b, sizeof(float), sizeof(float), rows,
                            cudaMemcpyDeviceToDevice, s2));
    CHECK(cudaDeviceSynchronize());
    // Arrays reached through a struct: c written from a's first half while s2 clears b.
    through<<<(n / 2 + 255) / 256, 256, 0, s1>>>(Pair{a, c}, n / 2);
    CHECK(cudaMemsetAsync(b, 0, sizeof(float), s2));
    CHECK(cudaDeviceSynchronize());
    float host[4];
    CHECK(cudaMemcpy(host, a, sizeof host, cudaMemcpyDeviceToHost));
    printf("footprint%s: a[0..4) = %g %g %g %g\n", race ? " race" : "", host[0], host[1], host[2], host[3]);
    return 0;
}
