// Several 1D Yee steps per pass over memory (temporal blocking): the algorithm of
// src/fused.rs, which documents why it gives the bits of one step at a time.
//
// Arrays are one device's held cells (src/fused.rs `Held`): `len` cells, `update_h`
// defined on h_lo..h_hi, `update_e` on e_lo..e_hi. A pass of `k` steps is two launches:
// `fused_edges` saves every tile's margins (and the Mur state) as they were before the
// pass, then `fused_steps` runs one block per tile: it loads its TILE cells and MARGIN =
// k + 1 cells each side into shared memory, runs k steps there and writes its own cells
// back. Blocks never read what another block writes. Compiled with --fmad=false.
//
// A split pass (`e` > 0, the mode fused-overlap): the `e` cells at each end are a tile
// each (the boundary) and the cells between are cut every TILE (the interior); one
// `fused_edges` saves the margins of every cut, then `fused_steps` runs the two boundary
// tiles in one launch and the interior tiles in another, each reading its margins from
// the strips: the same bits as one launch of every tile, in either order. A fused_store
// pass (the mode fused-p2p) is every tile of a split pass in one launch, its halos read
// from the strips too, and its end cells stored into the neighbours' halos.

// TILE, MAX_STEPS and MAX_SOURCES come from src/kernels.rs, through build.rs.
#if !defined(TILE) || !defined(MAX_STEPS) || !defined(MAX_SOURCES)
#error "build with -DTILE=… -DMAX_STEPS=… -DMAX_SOURCES=… (build.rs passes src/kernels.rs)"
#endif
#define MAX_MARGIN (MAX_STEPS + 1)
#define SPAN (TILE + 2 * MAX_MARGIN)

// Where tile b of a pass over `len` cells begins (tile b is cut(b) .. cut(b + 1)): every
// TILE cells when e == 0; when e > 0, cut(0) = 0, the interior's cuts from e to len - e
// (clipped so that both ends fit), and the last tile's end at len (src/fused.rs `split`).
__device__ int cut(int b, int len, int e) {
    if (e == 0) {
        return min(b * TILE, len);
    }
    int c1 = min(e, len);
    int c2 = max(len - e, c1);
    int m = (c2 - c1 + TILE - 1) / TILE; // interior tiles
    if (b == 0) {
        return 0;
    }
    if (b <= m + 1) {
        return min(c1 + (b - 1) * TILE, c2);
    }
    return len;
}

// Strip b holds cells cut(b) - margin .. cut(b) + margin of both fields (clipped to the
// array). One block per strip, one thread per cell; block 0 also saves `prev`.
extern "C" __global__ void fused_edges(const float *__restrict__ ex, const float *__restrict__ hy,
                                       const float *__restrict__ prev, float *__restrict__ strip_ex,
                                       float *__restrict__ strip_hy, float *__restrict__ prev_in,
                                       int len, int margin, int e) {
    int b = blockIdx.x;
    int i = threadIdx.x;
    int j = cut(b, len, e) - margin + i;
    if (i < 2 * margin && j >= 0 && j < len) {
        strip_ex[b * 2 * margin + i] = ex[j];
        strip_hy[b * 2 * margin + i] = hy[j];
    }
    if (b == 0 && i == 0) {
        prev_in[0] = prev[0];
        prev_in[1] = prev[1];
    }
}

// The sources of a pass, passed by value (src/runtime/cuda/wide.rs writes these bytes):
// value[t][i] is source i's value in step t of the pass (computed on the host in f64 and
// rounded once, as on the CPU), at local cell pos[i], hard (imposed) or soft (added).
struct Sources {
    float value[MAX_STEPS][MAX_SOURCES];
    int pos[MAX_SOURCES];
    int hard[MAX_SOURCES];
    int n;
};

// End kinds: 0 none, 1 PEC, 2 Mur. Block i runs tile first + i, plus `jump` for every
// block but the first (a split pass's boundary: tiles 0 and m + 1 in one launch).
//
// Cells own_lo .. own_hi are read from and written back to the fields; a tile's cells
// outside them (a fused_store pass's halos, which the neighbours store into meanwhile)
// are read from the strips like margins and not written back. A fused_store pass also
// stores the `store_n` cells at each end of own_lo .. own_hi into the neighbours' halos:
// l_ex/l_hy (the left neighbour's cells own_lo .. own_lo + store_n) and r_ex/r_hy (the
// right one's own_hi - store_n .. own_hi), peer memory; null where there is none.
extern "C" __global__ void fused_steps(float *__restrict__ ex, float *__restrict__ hy,
                                       const float *__restrict__ ca, const float *__restrict__ cb,
                                       float *__restrict__ prev, const float *__restrict__ prev_in,
                                       const float *__restrict__ strip_ex,
                                       const float *__restrict__ strip_hy, Sources src, int len, int k,
                                       float ch, int h_lo, int h_hi, int e_lo, int e_hi,
                                       int left_kind, int left, float left_mur, int right_kind,
                                       int right, float right_mur, int e, int first, int jump,
                                       int own_lo, int own_hi, int store_n, float *l_ex, float *l_hy,
                                       float *r_ex, float *r_hy) {
    __shared__ float sex[SPAN];
    __shared__ float shy[SPAN];
    __shared__ float sca[SPAN];
    __shared__ float scb[SPAN];
    const int margin = k + 1;
    const int b = first + blockIdx.x + (blockIdx.x > 0 ? jump : 0);
    const int t0 = cut(b, len, e);
    const int t1 = cut(b + 1, len, e);
    const int base = t0 - margin; // shared index = global (local array) index − base
    const int a = max(base, 0);
    const int z = min(t1 + margin, len);
    const int tid = threadIdx.x;
    const int bd = blockDim.x;

    for (int j = a + tid; j < z; j += bd) {
        int s = j - base;
        float e, h;
        if (j < t0 || (j < t1 && j < own_lo)) {
            e = strip_ex[b * 2 * margin + s];
            h = strip_hy[b * 2 * margin + s];
        } else if (j < t1 && j < own_hi) {
            e = ex[j];
            h = hy[j];
        } else {
            int i = (b + 1) * 2 * margin + (j - (t1 - margin));
            e = strip_ex[i];
            h = strip_hy[i];
        }
        sex[s] = e;
        shy[s] = h;
        sca[s] = ca[j];
        scb[s] = cb[j];
    }
    float p0 = prev_in[0];
    float p1 = prev_in[1];
    __syncthreads();

    const int hl = max(a, h_lo), hh = min(z - 1, h_hi);
    const int el = max(a + 1, e_lo), eh = min(z, e_hi);
    for (int t = 0; t < k; t++) {
        for (int j = hl + tid; j < hh; j += bd) {
            int s = j - base;
            shy[s] = shy[s] + ch * (sex[s] - sex[s + 1]);
        }
        __syncthreads();
        for (int j = el + tid; j < eh; j += bd) {
            int s = j - base;
            sex[s] = sca[s] * sex[s] + scb[s] * (shy[s - 1] - shy[s]);
        }
        __syncthreads();
        if (tid == 0) {
            for (int i = 0; i < src.n; i++) {
                int pos = src.pos[i];
                if (pos >= a && pos < z) {
                    float v = src.value[t][i];
                    int s = pos - base;
                    sex[s] = src.hard[i] ? v : sex[s] + v;
                }
            }
            if (left_kind != 0 && left >= a && left + 1 < z) {
                float inner = sex[left + 1 - base];
                int s = left - base;
                sex[s] = left_kind == 1 ? 0.0f : p0 + left_mur * (inner - sex[s]);
                p0 = inner;
            }
            if (right_kind != 0 && right > a && right < z) {
                float inner = sex[right - 1 - base];
                int s = right - base;
                sex[s] = right_kind == 1 ? 0.0f : p1 + right_mur * (inner - sex[s]);
                p1 = inner;
            }
        }
        __syncthreads();
    }

    const int w0 = max(t0, own_lo), w1 = min(t1, own_hi);
    for (int j = w0 + tid; j < w1; j += bd) {
        float e = sex[j - base], h = shy[j - base];
        ex[j] = e;
        hy[j] = h;
        if (l_ex != nullptr && j < own_lo + store_n) {
            l_ex[j - own_lo] = e;
            l_hy[j - own_lo] = h;
        }
        if (r_ex != nullptr && j >= own_hi - store_n) {
            r_ex[j - (own_hi - store_n)] = e;
            r_hy[j - (own_hi - store_n)] = h;
        }
    }
    if (tid == 0) {
        if (left_kind != 0 && left >= w0 && left < w1) {
            prev[0] = p0;
        }
        if (right_kind != 0 && right >= w0 && right < w1) {
            prev[1] = p1;
        }
    }
}

// A fused_store pass's stores in 2D, where the save ran the pass: `na` floats from a to
// a_to and `nb` from b to b_to (a side's rows of Ez and of H), peer memory. Grid-strided.
extern "C" __global__ void store_rows(const float *__restrict__ a, float *a_to, int na,
                                      const float *__restrict__ b, float *b_to, int nb) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < na + nb; i += gridDim.x * blockDim.x) {
        if (i < na) {
            a_to[i] = a[i];
        } else {
            b_to[i - na] = b[i - na];
        }
    }
}
