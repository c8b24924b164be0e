// 1D Yee kernels of haloscope's cuda runtime.
//
// They must perform the float operations of src/physics.rs in the same order, and are
// compiled with --fmad=false (build.rs), so the GPU and the CPU agree bit for bit.
//
// Every array is a device's local array (src/decomp.rs): HALO halo cells, the m owned
// cells, HALO halo cells. `start`/`count` select local indices start..start+count.

// __restrict__: the arrays never alias, so reads may take the read-only data path (the
// float operations, and so the bits, are unchanged).
extern "C" __global__ void update_h(float *__restrict__ hy, const float *__restrict__ ex, float ch,
                                    unsigned int start, unsigned int count) {
    unsigned int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < count) {
        unsigned int i = start + j;
        hy[i] = hy[i] + ch * (ex[i] - ex[i + 1]);
    }
}

extern "C" __global__ void update_e(float *__restrict__ ex, const float *__restrict__ hy,
                                    const float *__restrict__ ca, const float *__restrict__ cb,
                                    unsigned int start, unsigned int count) {
    unsigned int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < count) {
        unsigned int i = start + j;
        ex[i] = ca[i] * ex[i] + cb[i] * (hy[i - 1] - hy[i]);
    }
}

// One source on local cell i: soft (hard == 0) adds `value`, hard imposes it. The value is
// computed on the host in f64 and rounded once to f32, as on the CPU.
extern "C" __global__ void apply_source(float *ex, unsigned int i, float value, int hard) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        ex[i] = hard ? value : ex[i] + value;
    }
}

// The grid ends a device holds, at local cells `first` and `last`: kind 0 none, 1 PEC,
// 2 first-order Mur with coefficient `mur_*`. prev[0] / prev[1] keep the inner node of the
// left / right end from the step before (physics::apply_end).
extern "C" __global__ void boundaries(float *ex, float *prev, unsigned int first, unsigned int last,
                                      int left, float mur_left, int right, float mur_right) {
    if (blockIdx.x != 0 || threadIdx.x != 0) {
        return;
    }
    if (left != 0) {
        float inner = ex[first + 1];
        ex[first] = left == 1 ? 0.0f : prev[0] + mur_left * (inner - ex[first]);
        prev[0] = inner;
    }
    if (right != 0) {
        float inner = ex[last - 1];
        ex[last] = right == 1 ? 0.0f : prev[1] + mur_right * (inner - ex[last]);
        prev[1] = inner;
    }
}
