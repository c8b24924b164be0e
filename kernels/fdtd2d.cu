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
