// 2D TMz Yee kernels of haloscope's cuda runtime.
//
// They perform the float operations of src/tmz.rs in the same order and are compiled with
// --fmad=false (build.rs), so the GPU and the CPU agree bit for bit.
//
// A device's arrays hold HALO halo rows, its owned rows and HALO halo rows (src/decomp.rs),
// row-major: `ez` has nx floats a row; `h` has 2·nx, Hx of the row then its Hy. `start` and
// `rows` select local rows start..start+rows. Threads: x over a row's cells, y over rows.

extern "C" __global__ void update_h_2d(float *__restrict__ h, const float *__restrict__ ez, float ch,
                                       unsigned int nx, unsigned int start, unsigned int rows,
                                       int periodic) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= nx || r >= rows) {
        return;
    }
    unsigned long long j = start + r;
    const float *e = ez + j * nx;
    const float *up = e + nx;
    float *hx = h + 2 * j * nx;
    float *hy = hx + nx;
    hx[i] = hx[i] + ch * (e[i] - up[i]);
    if (i + 1 < nx) {
        hy[i] = hy[i] + ch * (e[i + 1] - e[i]);
    } else if (periodic) {
        hy[i] = hy[i] + ch * (e[0] - e[i]);
    }
}

extern "C" __global__ void update_e_2d(float *__restrict__ ez, const float *__restrict__ h,
                                       const float *__restrict__ ca, const float *__restrict__ cb,
                                       unsigned int nx, unsigned int start, unsigned int rows,
                                       int periodic) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= nx || r >= rows) {
        return;
    }
    if (!periodic && (i == 0 || i + 1 == nx)) {
        return;
    }
    unsigned long long j = start + r;
    const float *hx_below = h + 2 * (j - 1) * nx;
    const float *hx = h + 2 * j * nx;
    const float *hy = hx + nx;
    unsigned int left = i == 0 ? nx - 1 : i - 1;
    unsigned long long k = j * nx + i;
    ez[k] = ca[k] * ez[k] + cb[k] * ((hy[i] - hy[left]) - (hx[i] - hx_below[i]));
}

// One source on `count` cells from `cells` (its columns of a row): soft (hard == 0) adds
// `value`, hard imposes it; the value computed on the host in f64, rounded once.
extern "C" __global__ void apply_source_2d(float *cells, unsigned int count, float value, int hard) {
    unsigned int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < count) {
        cells[c] = hard ? value : cells[c] + value;
    }
}

// The first and last rows of the grid where this device holds them, at local rows `first`
// and `last`: kind 0 none, 1 PEC, 2 first-order Mur with the per-column coefficients
// mur[0..nx] (bottom) and mur[nx..2nx] (top); prev keeps the inner rows of the step
// before in the same layout (tmz::apply_end_row).
extern "C" __global__ void end_rows_2d(float *ez, float *prev, const float *mur, unsigned int nx,
                                       unsigned int first, unsigned int last, int bottom, int top) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nx) {
        return;
    }
    if (bottom != 0) {
        unsigned long long e = (unsigned long long)first * nx + i;
        float inner = ez[e + nx];
        ez[e] = bottom == 1 ? 0.0f : prev[i] + mur[i] * (inner - ez[e]);
        prev[i] = bottom == 1 ? prev[i] : inner;
    }
    if (top != 0) {
        unsigned long long e = (unsigned long long)last * nx + i;
        float inner = ez[e - nx];
        ez[e] = top == 1 ? 0.0f : prev[nx + i] + mur[nx + i] * (inner - ez[e]);
        prev[nx + i] = top == 1 ? prev[nx + i] : inner;
    }
}

// PEC sides: columns 0 and nx−1 of local rows start..start+rows set to 0.
extern "C" __global__ void pec_sides_2d(float *ez, unsigned int nx, unsigned int start, unsigned int rows) {
    unsigned int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        unsigned long long j = start + r;
        ez[j * nx] = 0.0f;
        ez[j * nx + nx - 1] = 0.0f;
    }
}

// Several 2D steps per pass over memory (temporal blocking), the 2D counterpart of
// kernels/fused.cu. A pass of k <= STEPS_2D steps reads one copy of the fields (ez_s,
// h_s, prev_s) and writes another (ez, h, prev): the host alternates the device's fields
// and a snapshot buffer as the two, so that a round ends in the fields: one block per tile of TILE_2D_Y rows by TILE_2D_X columns loads its tile and
// m = k + 1 rows and columns around it (its region) from the snapshot into shared memory
// (ca and cb read from the arrays), runs the k steps of src/tmz.rs there, and writes its
// own cells back; a plain tile does the same in registers (plain_pass, below).
// Blocks read only the snapshot and write only their own cells, so they never race. A
// cell near the region's edge that lacks a neighbour is left as it was: it goes wrong, but
// a wrong value moves one cell a step (once two, at a Mur row, which reads its inner
// neighbour's new value: hence k + 1, not k) and the tile's own cells are m away. Where the region reaches the end of
// the array or of the pass's rows, the step does there exactly what the one-kernel steps
// do (the cells beyond are the snapshot's, never written), so every cell the pass writes
// has the bits of k steps of update_h_2d, update_e_2d and the sources and boundaries.
//
// Rows are local rows of the held array (0..held). The pass updates H on rows
// h_lo..h_hi, E on e_lo..e_hi and applies sources, end rows and PEC sides on s_lo..s_hi
// (each one-kernel launch's rows); w0..w1 is their union, and the launch's tiles cut
// t0..t1 within it (all of it but in a split pass's parts, src/geometry/plane/fused.rs). A region as wide as the
// row or wider loads the whole row (its columns wrap exactly when periodic).
#if !defined(TILE_2D_X) || !defined(TILE_2D_Y) || !defined(STEPS_2D) || !defined(MAX_SOURCES) || !defined(THREADS_2D)
#error "build with -DTILE_2D_X=… -DTILE_2D_Y=… -DSTEPS_2D=… -DMAX_SOURCES=… -DTHREADS_2D=… (build.rs)"
#endif
#define M2 (STEPS_2D + 1)
#define RW (TILE_2D_X + 2 * M2)
#define RH (TILE_2D_Y + 2 * M2)

// The sources of a 2D pass, by value (src/runtime/cuda/plane.rs writes these bytes):
// value[t][i] is source i's value in step t of the pass, on local row row[i], columns
// c0[i]..c1[i], hard (imposed) or soft (added).
struct Sources2d {
    float value[STEPS_2D][MAX_SOURCES];
    int row[MAX_SOURCES];
    int c0[MAX_SOURCES];
    int c1[MAX_SOURCES];
    int hard[MAX_SOURCES];
    int n;
};

// ---- A plain tile's pass in registers --------------------------------------------------
//
// Most tiles of a large plane hold no source, no end row, no side column, no wrap, no end
// of the update ranges and no first or last row of the pass's tiles, and their region is
// whole (RW × RH, k = STEPS_2D): there every region cell is updated every step, as a
// region's cells away from those are. Such a tile's pass runs in registers: warp v holds
// region rows PLAIN_ROWS v .. PLAIN_ROWS (v + 1), lane l columns 2 l and 2 l + 1 of Ez, Hx
// and Hy, read from the snapshot and written back to the fields directly; ca and cb wait in
// shared memory (read two cells at a time). Column neighbours come by warp shuffles, the
// row neighbours beyond a warp's rows through two small shared rows, a barrier each. A cell
// at the region's edge reads its own value for the missing neighbour: wrong, as an edge cell
// of the shared-memory steps is (not updated there), and M2 cells away from the tile's own.
// The float operations are those of the shared-memory steps, in the same order.
#define PLAIN_WARPS (THREADS_2D / 32)
#define PLAIN_ROWS (RH / PLAIN_WARPS)
#if RW != 64 || PLAIN_ROWS * PLAIN_WARPS != RH
#error "a plain tile's region must be 64 columns and rows a multiple of its warps"
#endif

// The region's first row and column are ra and cs, the tile's own cells rows r0 .. r1,
// columns c0 .. c1. `sca`, `scb`: 2 RH RW floats of shared memory.
__device__ __forceinline__ void plain_pass(float *__restrict__ ez_f, float *__restrict__ h_f,
                                           const float *__restrict__ ez_s,
                                           const float *__restrict__ h_s,
                                           const float *__restrict__ ca, const float *__restrict__ cb,
                                           float *sca, float *scb, long long nx, float ch, int k,
                                           int ra, int cs, int r0, int r1, int c0, int c1) {
    __shared__ float edge_ez[PLAIN_WARPS][RW]; // each warp's first row of Ez
    __shared__ float edge_hx[PLAIN_WARPS][RW]; // each warp's last row of Hx
    const unsigned full = 0xffffffffu;
    const int lane = threadIdx.x % 32, v = threadIdx.x / 32, l2 = 2 * lane;
    float ez[PLAIN_ROWS][2], hx[PLAIN_ROWS][2], hy[PLAIN_ROWS][2];
#pragma unroll
    for (int r = 0; r < PLAIN_ROWS; r++) {
        const long long j = ra + PLAIN_ROWS * v + r, g = cs + l2;
#pragma unroll
        for (int c = 0; c < 2; c++) {
            ez[r][c] = ez_s[j * nx + g + c];
            hx[r][c] = h_s[2 * j * nx + g + c];
            hy[r][c] = h_s[2 * j * nx + nx + g + c];
        }
    }
    for (int i = threadIdx.x; i < RH * RW; i += THREADS_2D) {
        const long long g = (ra + i / RW) * nx + cs + i % RW;
        sca[i] = ca[g];
        scb[i] = cb[g];
    }
    __syncthreads();
    for (int t = 0; t < k; t++) {
        edge_ez[v][l2] = ez[0][0];
        edge_ez[v][l2 + 1] = ez[0][1];
        __syncthreads();
#pragma unroll
        for (int r = 0; r < PLAIN_ROWS; r++) {
            const float right = __shfl_down_sync(full, ez[r][0], 1);
#pragma unroll
            for (int c = 0; c < 2; c++) {
                float up = ez[r][c];
                if (r + 1 < PLAIN_ROWS) {
                    up = ez[r + 1][c];
                } else if (v + 1 < PLAIN_WARPS) {
                    up = edge_ez[v + 1][l2 + c];
                }
                hx[r][c] = hx[r][c] + ch * (ez[r][c] - up);
                const float rn = c == 0 ? ez[r][1] : right;
                hy[r][c] = hy[r][c] + ch * (rn - ez[r][c]);
            }
        }
        edge_hx[v][l2] = hx[PLAIN_ROWS - 1][0];
        edge_hx[v][l2 + 1] = hx[PLAIN_ROWS - 1][1];
        __syncthreads();
#pragma unroll
        for (int r = 0; r < PLAIN_ROWS; r++) {
            const int s = (PLAIN_ROWS * v + r) * RW + l2;
            const float2 a = *reinterpret_cast<const float2 *>(sca + s);
            const float2 b = *reinterpret_cast<const float2 *>(scb + s);
            const float left = __shfl_up_sync(full, hy[r][1], 1);
#pragma unroll
            for (int c = 0; c < 2; c++) {
                float below = hx[r][c];
                if (r > 0) {
                    below = hx[r - 1][c];
                } else if (v > 0) {
                    below = edge_hx[v - 1][l2 + c];
                }
                const float ln = c == 1 ? hy[r][0] : left;
                const float fa = c == 0 ? a.x : a.y, fb = c == 0 ? b.x : b.y;
                ez[r][c] = fa * ez[r][c] + fb * ((hy[r][c] - ln) - (hx[r][c] - below));
            }
        }
    }
#pragma unroll
    for (int r = 0; r < PLAIN_ROWS; r++) {
        const long long j = ra + PLAIN_ROWS * v + r;
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const long long g = cs + l2 + c;
            if (j >= r0 && j < r1 && g >= c0 && g < c1) {
                ez_f[j * nx + g] = ez[r][c];
                h_f[2 * j * nx + g] = hx[r][c];
                h_f[2 * j * nx + nx + g] = hy[r][c];
            }
        }
    }
}

extern "C" __global__ void fused_steps_2d(
    float *__restrict__ ez, float *__restrict__ h, const float *__restrict__ ez_s,
    const float *__restrict__ h_s, const float *__restrict__ ca, const float *__restrict__ cb,
    float *__restrict__ prev, const float *__restrict__ prev_s, const float *__restrict__ mur,
    Sources2d src, int nx, int periodic, float ch, int k, int held, int w0, int w1, int t0,
    int t1, int h_lo, int h_hi, int e_lo, int e_hi, int s_lo, int s_hi, int first, int last,
    int bottom, int top) {
    // Ez, Hx and Hy of the region (a plain tile's pass: ca and cb): src/kernels.rs
    // shared_2d() bytes. ca and cb of a tile that is not plain are read from the arrays.
    extern __shared__ float region[];
    float *sez = region, *shx = region + RH * RW, *shy = region + 2 * RH * RW;
    float *sca = region, *scb = region + RH * RW; // a plain tile's
    __shared__ float spb[RW];
    __shared__ float spt[RW];
    // Per local column: its global column and its neighbours' local columns (-1: none).
    __shared__ int scol[RW];
    __shared__ int sright[RW];
    __shared__ int sleft[RW];
    const int m = k + 1;
    const int r0 = t0 + blockIdx.y * TILE_2D_Y, r1 = min(r0 + TILE_2D_Y, t1);
    const int c0 = blockIdx.x * TILE_2D_X, c1 = min(c0 + TILE_2D_X, nx);
    const int ra = max(r0 - m, 0), rz = min(r1 + m, held);
    const int rows = rz - ra;
    const bool full = nx <= RW;
    int cs, w; // the region's first column (before wrapping) and its width
    if (full) {
        cs = 0;
        w = nx;
    } else if (periodic) {
        cs = c0 - m;
        w = c1 - c0 + 2 * m;
    } else {
        cs = max(c0 - m, 0);
        w = min(c1 + m, nx) - cs;
    }
    // A plain tile (plain_pass above): its whole region inside the row and the ranges, no
    // source row, end row, side column or first or last tile row of the pass in it.
    bool plain = !full && k == STEPS_2D && c1 - c0 == TILE_2D_X && r1 - r0 == TILE_2D_Y &&
                 r0 != w0 && r1 != w1 && cs >= 1 && cs + w <= nx - 1 && ra == r0 - m &&
                 rz == r1 + m && ra >= h_lo && rz <= h_hi && ra + 1 >= e_lo && rz <= e_hi &&
                 !(bottom != 0 && first >= ra - 1 && first <= rz) &&
                 !(top != 0 && last >= ra - 1 && last <= rz) && blockDim.x == THREADS_2D;
    for (int i = 0; i < src.n; i++) {
        plain = plain && !(src.row[i] >= ra - 1 && src.row[i] <= rz);
    }
    if (plain) {
        plain_pass(ez, h, ez_s, h_s, ca, cb, sca, scb, nx, ch, k, ra, cs, r0, r1, c0, c1);
        return;
    }
    // Threads as 32 columns by blockDim.x / 32 rows: each loops over the region's columns
    // and, within one, over its rows.
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32, ny = blockDim.x / 32;
    for (int lc = threadIdx.x; lc < w; lc += blockDim.x) {
        int g = ((cs + lc) % nx + nx) % nx;
        scol[lc] = g;
        sright[lc] = lc + 1 < w ? lc + 1 : (full && periodic ? 0 : -1);
        sleft[lc] = lc > 0 ? lc - 1 : (full && periodic ? w - 1 : -1);
        spb[lc] = bottom == 2 ? prev_s[g] : 0.0f;
        spt[lc] = top == 2 ? prev_s[nx + g] : 0.0f;
    }
    __syncthreads();
    for (int lc = tx; lc < w; lc += 32) {
        long long g = scol[lc];
        for (int lr = ty; lr < rows; lr += ny) {
            long long j = ra + lr;
            int s = lr * RW + lc;
            sez[s] = ez_s[j * nx + g];
            shx[s] = h_s[2 * j * nx + g];
            shy[s] = h_s[2 * j * nx + nx + g];
        }
    }
    __syncthreads();

    // The rows of the region each update covers.
    const int ha = max(h_lo, ra) - ra, hz = min(h_hi, rz) - ra;
    const int ea = max(e_lo, ra + 1) - ra, ez_ = min(e_hi, rz) - ra;
    const int sa = max(s_lo, ra) - ra, sz = min(s_hi, rz) - ra;
    for (int t = 0; t < k; t++) {
        for (int lc = tx; lc < w; lc += 32) {
            int g = scol[lc], rn = sright[lc];
            bool hy_on = (g + 1 < nx || periodic) && rn >= 0;
            for (int lr = ha + ty; lr < hz; lr += ny) {
                int s = lr * RW + lc;
                if (lr + 1 < rows) {
                    shx[s] = shx[s] + ch * (sez[s] - sez[s + RW]);
                }
                if (hy_on) {
                    shy[s] = shy[s] + ch * (sez[lr * RW + rn] - sez[s]);
                }
            }
        }
        __syncthreads();
        for (int lc = tx; lc < w; lc += 32) {
            int g = scol[lc];
            int ln = sleft[lc];
            if (ln < 0 || (!periodic && (g == 0 || g + 1 == nx))) {
                continue;
            }
            for (int lr = ea + ty; lr < ez_; lr += ny) {
                int s = lr * RW + lc;
                const long long q = (ra + lr) * (long long)nx + g;
                sez[s] = ca[q] * sez[s] + cb[q] * ((shy[s] - shy[lr * RW + ln]) - (shx[s] - shx[s - RW]));
            }
        }
        __syncthreads();
        if (src.n > 0) {
            for (int lc = threadIdx.x; lc < w; lc += blockDim.x) {
                int g = scol[lc];
                for (int i = 0; i < src.n; i++) {
                    int lr = src.row[i] - ra;
                    if (lr >= 0 && lr < rows && g >= src.c0[i] && g < src.c1[i]) {
                        float v = src.value[t][i];
                        int s = lr * RW + lc;
                        sez[s] = src.hard[i] ? v : sez[s] + v;
                    }
                }
            }
            __syncthreads();
        }
        if (bottom != 0 || top != 0) {
            for (int lc = threadIdx.x; lc < w; lc += blockDim.x) {
                int g = scol[lc];
                if (bottom != 0 && first >= ra && first + 1 < rz) {
                    int s = (first - ra) * RW + lc;
                    float inner = sez[s + RW];
                    sez[s] = bottom == 1 ? 0.0f : spb[lc] + mur[g] * (inner - sez[s]);
                    spb[lc] = bottom == 1 ? spb[lc] : inner;
                }
                if (top != 0 && last < rz && last - 1 >= ra) {
                    int s = (last - ra) * RW + lc;
                    float inner = sez[s - RW];
                    sez[s] = top == 1 ? 0.0f : spt[lc] + mur[nx + g] * (inner - sez[s]);
                    spt[lc] = top == 1 ? spt[lc] : inner;
                }
            }
            __syncthreads();
        }
        if (!periodic && (scol[0] == 0 || scol[w - 1] == nx - 1)) {
            for (int lr = sa + threadIdx.x; lr < sz; lr += blockDim.x) {
                if (scol[0] == 0) {
                    sez[lr * RW] = 0.0f;
                }
                if (scol[w - 1] == nx - 1) {
                    sez[lr * RW + w - 1] = 0.0f;
                }
            }
            __syncthreads();
        }
    }

    // Own cells back to the fields; the Mur state of own columns where the tile holds
    // an end row.
    for (int g = c0 + tx; g < c1; g += 32) {
        int lc = full ? g : g - cs;
        for (long long j = r0 + ty; j < r1; j += ny) {
            int s = ((int)j - ra) * RW + lc;
            ez[j * nx + g] = sez[s];
            h[2 * j * nx + g] = shx[s];
            h[2 * j * nx + nx + g] = shy[s];
        }
    }
    for (int g = c0 + threadIdx.x; g < c1; g += blockDim.x) {
        int lc = full ? g : g - cs;
        if (bottom == 2 && first >= r0 && first < r1) {
            prev[g] = spb[lc];
        }
        if (top == 2 && last >= r0 && last < r1) {
            prev[nx + g] = spt[lc];
        }
    }
    // The rows next to the written ones that a pass's regions read, which no tile writes:
    // the first and last row of tiles copy them (their own columns) from what the pass
    // read to what it wrote, so that passes may alternate between the fields and the
    // snapshot (src/runtime/cuda/plane.rs) with every row a region reads up to date. A
    // split pass's part (its tiles cut t0..t1, part of the written rows) writes the fields,
    // which hold those rows already, and copies nothing.
    if (t0 == w0 && t1 == w1 && (r0 == w0 || r1 == w1)) {
        const int below = max(w0 - M2, 0), above = min(w1 + M2, held);
        for (int g = c0 + tx; g < c1; g += 32) {
            for (long long j = below + ty; j < w0 && r0 == w0; j += ny) {
                ez[j * nx + g] = ez_s[j * nx + g];
                h[2 * j * nx + g] = h_s[2 * j * nx + g];
                h[2 * j * nx + nx + g] = h_s[2 * j * nx + nx + g];
            }
            for (long long j = w1 + ty; j < above && r1 == w1; j += ny) {
                ez[j * nx + g] = ez_s[j * nx + g];
                h[2 * j * nx + g] = h_s[2 * j * nx + g];
                h[2 * j * nx + nx + g] = h_s[2 * j * nx + nx + g];
            }
        }
    }
}
