// Snapshot reduction of haloscope's cuda runtime: the owned cells of a device reduced to
// screen columns, so what is copied to the host grows with the screen, not the grid.
//
// Column c of the device covers local cells edges[c]..edges[c+1] (owned cells only). Each
// column is cut into gridDim.y chunks, one block each (enough blocks to read the grid at
// full bandwidth); out[4*(c*gridDim.y + chunk) ..][0..4] = min Ex, max Ex, min Hy, max Hy
// of the chunk, and the host merges a column's chunks (an empty chunk gives +inf, -inf).
// A NaN is kept (fminf and fmaxf would drop it): the host sees that a field blew up.

// BLOCK (threads per block) comes from src/kernels.rs, through build.rs.
#ifndef BLOCK
#error "build with -DBLOCK=… (build.rs passes src/kernels.rs)"
#endif

static __device__ float nan_min(float a, float b) { return (a != a || a < b) ? a : b; }
static __device__ float nan_max(float a, float b) { return (a != a || a > b) ? a : b; }

// The block's extremes of its threads' four partial results (min, max of E; min, max of
// H) into out[0..4]; every thread of the block calls it.
static __device__ void block_extremes(float (*s)[BLOCK], float e_lo, float e_hi, float h_lo,
                                      float h_hi, float *out) {
    s[0][threadIdx.x] = e_lo;
    s[1][threadIdx.x] = e_hi;
    s[2][threadIdx.x] = h_lo;
    s[3][threadIdx.x] = h_hi;
    __syncthreads();
    for (unsigned int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) {
            s[0][threadIdx.x] = nan_min(s[0][threadIdx.x], s[0][threadIdx.x + w]);
            s[1][threadIdx.x] = nan_max(s[1][threadIdx.x], s[1][threadIdx.x + w]);
            s[2][threadIdx.x] = nan_min(s[2][threadIdx.x], s[2][threadIdx.x + w]);
            s[3][threadIdx.x] = nan_max(s[3][threadIdx.x], s[3][threadIdx.x + w]);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        for (int k = 0; k < 4; k++) {
            out[k] = s[k][0];
        }
    }
}

extern "C" __global__ void reduce_columns(const float *ex, const float *hy, const unsigned int *edges,
                                          unsigned int columns, float *out) {
    __shared__ float s[4][BLOCK];
    unsigned int c = blockIdx.x;
    if (c >= columns) {
        return;
    }
    float ex_lo = __int_as_float(0x7f800000), ex_hi = -__int_as_float(0x7f800000);
    float hy_lo = ex_lo, hy_hi = ex_hi;
    unsigned int lo = edges[c], n = edges[c + 1] - edges[c];
    unsigned int from = lo + (unsigned int)((unsigned long long)n * blockIdx.y / gridDim.y);
    unsigned int to = lo + (unsigned int)((unsigned long long)n * (blockIdx.y + 1) / gridDim.y);
    for (unsigned int i = from + threadIdx.x; i < to; i += blockDim.x) {
        ex_lo = nan_min(ex_lo, ex[i]);
        ex_hi = nan_max(ex_hi, ex[i]);
        hy_lo = nan_min(hy_lo, hy[i]);
        hy_hi = nan_max(hy_hi, hy[i]);
    }
    block_extremes(s, ex_lo, ex_hi, hy_lo, hy_hi, out + 4 * (c * gridDim.y + blockIdx.y));
}

// A 2D device's owned rows reduced to a heat map's cells: block b covers local rows
// edges[b / buckets]..edges[b / buckets + 1] and columns cols[b % buckets]..cols[… + 1]
// (`edges` holds the bands' rows then, from edges[bands + 1], the buckets' columns);
// out[4b..][0..4] = min Ez, max Ez, min H, max H over Hx and Hy of those cells.
extern "C" __global__ void reduce_plane(const float *ez, const float *h, unsigned int nx,
                                        const unsigned int *edges, unsigned int bands,
                                        unsigned int buckets, float *out) {
    __shared__ float s[4][BLOCK];
    unsigned int b = blockIdx.x;
    if (b >= bands * buckets) {
        return;
    }
    const unsigned int *cols = edges + bands + 1;
    unsigned int band = b / buckets, q = b % buckets;
    unsigned int r0 = edges[band], c0 = cols[q];
    unsigned int width = cols[q + 1] - c0;
    unsigned long long n = (unsigned long long)(edges[band + 1] - r0) * width;
    float e_lo = __int_as_float(0x7f800000), e_hi = -__int_as_float(0x7f800000);
    float h_lo = e_lo, h_hi = e_hi;
    for (unsigned long long k = threadIdx.x; k < n; k += blockDim.x) {
        unsigned long long j = r0 + k / width;
        unsigned int i = c0 + (unsigned int)(k % width);
        float e = ez[j * nx + i], hx = h[2 * j * nx + i], hy = h[2 * j * nx + nx + i];
        e_lo = nan_min(e_lo, e);
        e_hi = nan_max(e_hi, e);
        h_lo = nan_min(nan_min(h_lo, hx), hy);
        h_hi = nan_max(nan_max(h_hi, hx), hy);
    }
    block_extremes(s, e_lo, e_hi, h_lo, h_hi, out + 4 * b);
}
