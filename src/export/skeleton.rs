//! The fixed text of `main.cu` around a program's step: the header's explanation, the
//! `--gpus` parser, `main`'s start and end, the host threads' start and their loop's.
//! `cuda.rs` writes the program's own part between them.

pub(super) const NCCL_BUILD: &str = "//        NCCL from pip (nvidia-nccl-cu13): NCCL=$(python3 -c 'import nvidia.nccl as m; print(m.__path__[0])')
//        then, for -lnccl: -I$NCCL/include -L$NCCL/lib -l:libnccl.so.2 -Xlinker -rpath=$NCCL/lib
";
pub(super) const HEADER: &str = "//
// One OpenMP host thread per logical device d (0 … n-1) runs the step below each round,
// with lo..hi the cells (rows in 2D) device d owns and gpuMapping[d] its GPU. Its halo
// cells are lo - HALO .. lo and hi .. hi + HALO. A kernel launched over the cells from..to
// works on those of them device d holds where it is defined: halo.cuh's kernel_range(d,
// ON_H, from, to) gives them as indices into d's arrays. halo.cuh holds the rest: the
// data, the memory, and the launches that take more than a few lines, in namespace launch
// (the sources and boundaries, a fused pass's tiles).

// The kernels' constants: haloscope's src/kernels.rs (its build.rs passes them to nvcc).
";

/// `--gpus LIST`'s parser in `main.cu`: plain C++ (the standard library's strings only),
/// a function of its own so that it is tested without a GPU (tests/export.rs compiles it).
pub(super) const PARSE_GPUS: &str = r#"
// --gpus LIST: exactly one GPU for each of the `devices` devices, comma-separated, each a
// visible GPU's index: digits only (no sign, no spaces), below `count` (the GPUs this
// process sees, cudaGetDeviceCount; CUDA_VISIBLE_DEVICES chooses them). Several devices
// may share a GPU, but not where `distinct` (NCCL refuses two ranks on one GPU). Fills
// gpu[0 .. devices) and says "" when LIST is good, else why it is not.
static std::string parse_gpus(const std::string &list, int devices, int count, bool distinct, int *gpu) {
    int got = 0;
    for (size_t from = 0;;) {
        size_t end = list.find(',', from);
        if (end == std::string::npos) end = list.size();
        const std::string item = list.substr(from, end - from);
        if (item.empty() || item.size() > 9 || item.find_first_not_of("0123456789") != std::string::npos)
            return "`" + item + "` is not a GPU's index (digits only: 0, 1, ...)";
        if (got == devices)
            return "more than one GPU for each of the " + std::to_string(devices) + " devices";
        const long g = std::stol(item);  // at most 9 digits: no overflow
        if (g >= count)
            return "GPU " + std::to_string(g) + ": this process sees " + std::to_string(count) +
                   " GPU(s), 0 to " + std::to_string(count - 1);
        for (int j = 0; distinct && j < got; j++)
            if (gpu[j] == g)
                return "devices " + std::to_string(j) + " and " + std::to_string(got) + " both on GPU " +
                       std::to_string(g) + ": NCCL refuses two ranks on one GPU";
        gpu[got++] = (int)g;
        if (end == list.size()) break;
        from = end + 1;
    }
    if (got != devices)
        return std::to_string(got) + " GPU(s) for " + std::to_string(devices) +
               " devices: give one for each device";
    return "";
}
"#;

/// `main`'s start: its flags (`distinct`: no GPU twice in `--gpus`).
pub(super) fn main_start(distinct: bool, flags: bool) -> String {
    let connections = if flags {
        "    // Several devices on one GPU wait on each other's flags through the hardware queues:\n    \
         // more than the default 8 keep a waiting stream from holding up the one it waits for.\n    \
         setenv(\"CUDA_DEVICE_MAX_CONNECTIONS\", \"32\", 0);\n"
    } else {
        ""
    };
    format!(
        r#"
int main(int argc, char **argv) {{
    std::string out = "fields", gpus;
    bool out_given = false, gpus_given = false;
    for (int a = 1; a < argc; a++) {{
        std::string arg = argv[a];
        if (arg == "--out" && a + 1 < argc && !out_given) {{
            out = argv[++a];
            out_given = true;
        }} else if (arg == "--gpus" && a + 1 < argc && !gpus_given) {{
            gpus = argv[++a];
            gpus_given = true;
        }} else {{
            fprintf(stderr, "usage: %s [--gpus LIST] [--out DIR]   (each once; fields to DIR, default fields/)\n", argv[0]);
            return 2;
        }}
    }}
    if (!gpus_given) {{
        for (int i = 0; i < n; i++) gpus += (i ? "," : "") + std::to_string(gpuMapping[i]);
    }}
{connections}    // Kernels loaded at start (halo.cuh's load_kernels also asks for each): a kernel loaded
    // at its first launch waits for the GPU's pending work.
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    int gpu_count = 0;  // after the settings above: CUDA reads them when it starts
    CHECK(cudaGetDeviceCount(&gpu_count));
    const std::string why = parse_gpus(gpus, n, gpu_count, {distinct}, gpuMapping);
    if (!why.empty()) {{
        fprintf(stderr, "%s %s: %s\n", gpus_given ? "--gpus" : "the default GPUs", gpus.c_str(), why.c_str());
        return 2;
    }}
"#
    )
}

pub(super) const MAIN_REST: &str = "
    set_up(\"data\", std::vector<int>(gpuMapping, gpuMapping + n));
";

pub(super) const THREAD_START: &str = "
    double start = 0, stop = 0;
#pragma omp parallel num_threads(n)
    {
        const int d = omp_get_thread_num();
        here_thread = d;
        CHECK(cudaSetDevice(gpuMapping[d]));
";

pub(super) const LOOP_START: &str = "#pragma omp barrier
#pragma omp single
        start = omp_get_wtime();
        for (long step = 0; step < steps; step += round) {
            here_step = step;
";

pub(super) const LOOP_END: &str = "        here_step = -1;
#pragma omp barrier
#pragma omp single
        stop = omp_get_wtime();
    }
";
pub(super) const FINISH: &str = "    mkdir_for(out);
    dump_fields(out);
    printf(\"%ld steps on %d devices in %.3f s: %.2f us per step; fields in %s/\\n\", steps, n,
           stop - start, 1e6 * (stop - start) / std::max(steps, 1L), out.c_str());
    return 0;
}
";
