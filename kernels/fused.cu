// Several 1D Yee steps per pass over memory (temporal blocking): the algorithm of
// src/fused.rs, which documents why it gives the bits of one step at a time.
//
// Arrays are one device's held cells (src/fused.rs `Held`): `len` cells, `update_h`
// defined on h_lo..h_hi, `update_e` on e_lo..e_hi. A pass of `k` steps is two launches:
// `fused_edges` saves every tile's margins (and the Mur state) as they were before the
// pass, then `fused_steps` runs one block per tile: it loads its TILE cells and MARGIN =
// k + 1 cells each side into registers, runs k steps there and writes its own cells
// back (below: how its warps share the tile). Blocks never read what another block
// writes. Compiled with --fmad=false.
//
// A split pass (`e` > 0, the mode fused-overlap): the `e` cells at each end are a tile
// each (the boundary) and the cells between are cut every TILE (the interior); one
// `fused_edges` saves the margins of every cut, then `fused_steps` runs the two boundary
// tiles in one launch and the interior tiles in another, each reading its margins from
// the strips: the same bits as one launch of every tile, in either order. A fused_store
// pass (the mode fused-p2p) is every tile of a split pass in one launch, its halos read
// from the strips too, and its end cells stored into the neighbours' halos.

// TILE, MAX_STEPS, MAX_SOURCES, LANE_CELLS and FUSED_WARPS come from src/kernels.rs,
// through build.rs.
#if !defined(TILE) || !defined(MAX_STEPS) || !defined(MAX_SOURCES)
#error "build with -DTILE=… -DMAX_STEPS=… -DMAX_SOURCES=… (build.rs passes src/kernels.rs)"
#endif
#define MAX_MARGIN (MAX_STEPS + 1)

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

// ---- fused_steps: the cells of a pass in registers ----------------------------------
//
// A block runs one tile with FUSED_WARPS warps. Warp w owns WARP_OWN cells of the tile
// (o0 .. o1) and holds WARP_CELLS cells in registers: its own and MAX_MARGIN each side
// (ws .. ws + WARP_CELLS), LANE_CELLS consecutive cells a lane. A step is then register
// arithmetic: each lane updates its run of cells, and the two neighbours beyond its run
// (Ex of the next lane's first cell for H, Hy of the previous lane's last cell for E) come
// by warp shuffles. Nothing is shared between warps while they step: the cells near a
// warp's edges go wrong as near a tile's (a lane at the edge reads its own cell for the
// missing neighbour) and the own cells are MAX_MARGIN >= k + 1 away. One barrier keeps
// the warps of a block from writing their cells back before every warp has read its
// margins (which are other warps' own cells); blocks read their tile's margins from the
// strips as before.
//
// Most warps hold no end of the grid, no end of the update ranges and no source: they
// step with no tests at all. A warp that holds one steps with per-cell masks and applies
// sources and ends as the one-step kernels do (`plain` below).
#if !defined(LANE_CELLS) || !defined(FUSED_WARPS)
#error "build with -DLANE_CELLS=… -DFUSED_WARPS=… (build.rs passes src/kernels.rs)"
#endif
#define WARP_CELLS (32 * LANE_CELLS)
#define WARP_OWN (WARP_CELLS - 2 * MAX_MARGIN)
#if TILE != FUSED_WARPS * WARP_OWN
#error "TILE must be FUSED_WARPS warps' own cells (src/kernels.rs)"
#endif
// A warp's staging area: cell c of its register cells at PAD(c), one float of padding
// every 32 so that both the coalesced pass (c = 32 i + lane) and a lane's run
// (c = LANE_CELLS lane + r) meet 32 different banks.
#define PAD(c) ((c) + (c) / 32)
#define STAGE (WARP_CELLS + WARP_CELLS / 32)
#define FULL 0xffffffffu

typedef float Run[LANE_CELLS];

// H on a lane's run: hy += ch (ex − ex of the next cell); `on` masks cells (bit r: cell r).
template <bool MASKED>
__device__ __forceinline__ void run_h(Run &ex, Run &hy, float ch, unsigned on) {
    const float next = __shfl_down_sync(FULL, ex[0], 1);
#pragma unroll
    for (int r = 0; r < LANE_CELLS; r++) {
        const float n = r + 1 < LANE_CELLS ? ex[r + 1] : next;
        const float v = hy[r] + ch * (ex[r] - n);
        hy[r] = (!MASKED || ((on >> r) & 1u)) ? v : hy[r];
    }
}

// E on a lane's run: ex = ca ex + cb (hy of the cell before − hy).
template <bool MASKED>
__device__ __forceinline__ void run_e(Run &ex, const Run &hy, const Run &ca, const Run &cb,
                                      unsigned on) {
    const float before = __shfl_up_sync(FULL, hy[LANE_CELLS - 1], 1);
#pragma unroll
    for (int r = 0; r < LANE_CELLS; r++) {
        const float p = r > 0 ? hy[r - 1] : before;
        const float v = ca[r] * ex[r] + cb[r] * (p - hy[r]);
        ex[r] = (!MASKED || ((on >> r) & 1u)) ? v : ex[r];
    }
}

// Cell c of the warp's register cells, to every lane.
__device__ __forceinline__ float warp_cell(const Run &v, int c) {
    const int at = c % LANE_CELLS;
    float mine = v[0];
#pragma unroll
    for (int r = 1; r < LANE_CELLS; r++) {
        mine = r == at ? v[r] : mine;
    }
    return __shfl_sync(FULL, mine, c / LANE_CELLS);
}

// Cell c of the warp's register cells := f(its value), on the lane that holds it.
template <typename F>
__device__ __forceinline__ void set_cell(Run &v, int c, int lane, F f) {
#pragma unroll
    for (int r = 0; r < LANE_CELLS; r++) {
        if (lane * LANE_CELLS + r == c) {
            v[r] = f(v[r]);
        }
    }
}

// Stage -> a lane's run, and back.
__device__ __forceinline__ void from_stage(Run &v, const float *st, int lane) {
#pragma unroll
    for (int r = 0; r < LANE_CELLS; r++) {
        v[r] = st[PAD(lane * LANE_CELLS + r)];
    }
}
__device__ __forceinline__ void to_stage(const Run &v, float *st, int lane) {
#pragma unroll
    for (int r = 0; r < LANE_CELLS; r++) {
        st[PAD(lane * LANE_CELLS + r)] = v[r];
    }
}

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
    __shared__ float stage[FUSED_WARPS][2][STAGE];
    const int margin = k + 1;
    const int b = first + blockIdx.x + (blockIdx.x > 0 ? jump : 0);
    const int t0 = cut(b, len, e);
    const int t1 = cut(b + 1, len, e);
    const int a = max(t0 - margin, 0); // the tile's region a .. z (its margins included)
    const int z = min(t1 + margin, len);
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    const int o0 = t0 + w * WARP_OWN, o1 = min(o0 + WARP_OWN, t1); // the warp's own cells
    const int ws = o0 - MAX_MARGIN, we = ws + WARP_CELLS;          // its register cells
    float *s0 = stage[w][0], *s1 = stage[w][1];
    Run rex, rhy, rca, rcb;

    // The region's cells, coalesced into the stage (zero outside the region), then each
    // lane's run: Ex and Hy from the fields or the strips, then ca and cb. Most warps'
    // cells are all the tile's own (no strip, no end): loaded without a test.
    if (ws >= max(t0, own_lo) && we <= min(t1, own_hi)) {
#pragma unroll
        for (int i = 0; i < LANE_CELLS; i++) {
            const int c = 32 * i + lane;
            s0[PAD(c)] = ex[ws + c];
            s1[PAD(c)] = hy[ws + c];
        }
    } else {
        for (int i = 0; i < LANE_CELLS; i++) {
            const int c = 32 * i + lane, j = ws + c;
            float ve = 0.0f, vh = 0.0f;
            if (j >= a && j < z) {
                if (j < t0 || (j < t1 && j < own_lo)) {
                    const int s = b * 2 * margin + j - (t0 - margin);
                    ve = strip_ex[s];
                    vh = strip_hy[s];
                } else if (j < t1 && j < own_hi) {
                    ve = ex[j];
                    vh = hy[j];
                } else {
                    const int s = (b + 1) * 2 * margin + (j - (t1 - margin));
                    ve = strip_ex[s];
                    vh = strip_hy[s];
                }
            }
            s0[PAD(c)] = ve;
            s1[PAD(c)] = vh;
        }
    }
    __syncwarp();
    from_stage(rex, s0, lane);
    from_stage(rhy, s1, lane);
    __syncwarp();
    const bool whole = ws >= a && we <= z;
#pragma unroll
    for (int i = 0; i < LANE_CELLS; i++) {
        const int c = 32 * i + lane, j = ws + c;
        const bool in = whole || (j >= a && j < z);
        s0[PAD(c)] = in ? ca[j] : 0.0f;
        s1[PAD(c)] = in ? cb[j] : 0.0f;
    }
    __syncwarp();
    from_stage(rca, s0, lane);
    from_stage(rcb, s1, lane);
    float p0 = prev_in[0];
    float p1 = prev_in[1];
    __syncthreads();

    // The cells each update covers, as the one-step kernels: H on hl .. hh, E on el .. eh.
    const int hl = max(a, h_lo), hh = min(z - 1, h_hi);
    const int el = max(a + 1, e_lo), eh = min(z, e_hi);
    bool plain = ws >= max(h_lo, e_lo) && we <= min(h_hi, e_hi) &&
                 !(left_kind != 0 && left >= ws && left < we) &&
                 !(right_kind != 0 && right >= ws && right < we);
    for (int i = 0; i < src.n; i++) {
        plain = plain && !(src.pos[i] >= ws && src.pos[i] < we);
    }
    const bool busy = o0 < o1;
    if (busy && plain) {
        for (int t = 0; t < k; t++) {
            run_h<false>(rex, rhy, ch, 0u);
            run_e<false>(rex, rhy, rca, rcb, 0u);
        }
    } else if (busy) {
        unsigned on_h = 0u, on_e = 0u;
        for (int r = 0; r < LANE_CELLS; r++) {
            const int j = ws + lane * LANE_CELLS + r;
            on_h |= (j >= hl && j < hh) ? 1u << r : 0u;
            on_e |= (j >= el && j < eh) ? 1u << r : 0u;
        }
        for (int t = 0; t < k; t++) {
            run_h<true>(rex, rhy, ch, on_h);
            run_e<true>(rex, rhy, rca, rcb, on_e);
            for (int i = 0; i < src.n; i++) {
                const int pos = src.pos[i];
                if (pos >= a && pos < z && pos >= ws && pos < we) {
                    const float v = src.value[t][i];
                    const bool hard = src.hard[i] != 0;
                    set_cell(rex, pos - ws, lane, [&](float x) { return hard ? v : x + v; });
                }
            }
            if (left_kind != 0 && left >= a && left + 1 < z && left >= ws && left + 1 < we) {
                const float inner = warp_cell(rex, left + 1 - ws);
                set_cell(rex, left - ws, lane, [&](float x) {
                    return left_kind == 1 ? 0.0f : p0 + left_mur * (inner - x);
                });
                p0 = inner;
            }
            if (right_kind != 0 && right > a && right < z && right - 1 >= ws && right < we) {
                const float inner = warp_cell(rex, right - 1 - ws);
                set_cell(rex, right - ws, lane, [&](float x) {
                    return right_kind == 1 ? 0.0f : p1 + right_mur * (inner - x);
                });
                p1 = inner;
            }
        }
    }
    if (!busy) {
        return;
    }

    // The warp's own cells back to the fields (coalesced, through the stage), and to the
    // neighbours' halos in a fused_store pass; the Mur state where the warp owns an end.
    const int w0 = max(max(t0, own_lo), o0), w1 = min(min(t1, own_hi), o1);
    __syncwarp();
    to_stage(rex, s0, lane);
    to_stage(rhy, s1, lane);
    __syncwarp();
    const bool stores = l_ex != nullptr || r_ex != nullptr;
#pragma unroll
    for (int i = 0; i < LANE_CELLS; i++) {
        const int c = 32 * i + lane, j = ws + c;
        if (j < w0 || j >= w1) {
            continue;
        }
        const float ve = s0[PAD(c)], vh = s1[PAD(c)];
        ex[j] = ve;
        hy[j] = vh;
        if (stores) {
            if (l_ex != nullptr && j < own_lo + store_n) {
                l_ex[j - own_lo] = ve;
                l_hy[j - own_lo] = vh;
            }
            if (r_ex != nullptr && j >= own_hi - store_n) {
                r_ex[j - (own_hi - store_n)] = ve;
                r_hy[j - (own_hi - store_n)] = vh;
            }
        }
    }
    if (lane == 0) {
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
