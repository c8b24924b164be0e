// halo.cuh: what main.cu stands on. The scenario's data as haloscope computed it (read
// from data/ at start: no floating-point arithmetic happens on the host), each logical
// device's memory, the kernels' launches (the same cell ranges, arguments and launch
// shapes as haloscope's cuda runtime, src/runtime/cuda/exec.rs), checked CUDA calls, and
// the .npy files. Written by `haloscope program export --cuda`; needs nothing of haloscope.
//
// Layout (src/decomp.rs): every per-device array holds its owned cells (rows in 2D) and
// HALO halo cells each side; local index i is global cell lo - HALO + i.
#pragma once

#include <cuda.h>  // types of the driver's stream memory operations (reached through the runtime)
#include <cuda_runtime.h>
#include <omp.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

//@if 1d
#include "kernels/fdtd1d.cu"
//@end
//@if 2d
#include "kernels/fdtd2d.cu"
//@end
//@if fused
#include "kernels/fused.cu"
//@end

// ---- checked calls ------------------------------------------------------------------

// Where each host thread is, for the message of a call that fails.
static thread_local int here_thread = -1;
static thread_local long here_step = -1;

static inline void fail(const char *file, int line, const char *call, const char *why) {
#pragma omp critical(halo_fail)
    {
        if (here_step >= 0) {
            fprintf(stderr, "%s:%d: %s failed: %s (host thread %d, step %ld)\n", file, line, call, why,
                    here_thread, here_step);
        } else {
            fprintf(stderr, "%s:%d: %s failed: %s (host thread %d, before the first step)\n", file,
                    line, call, why, here_thread);
        }
        fflush(stderr);
        std::_Exit(1);
    }
}

static inline void check_call(cudaError_t e, const char *call, const char *file, int line) {
    if (e != cudaSuccess) {
        std::string why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
        fail(file, line, call, why.c_str());
    }
}

//@if flags
static inline void check_call(CUresult e, const char *call, const char *file, int line) {
    if (e != CUDA_SUCCESS) {
        std::string why = "driver error " + std::to_string((int)e);
        fail(file, line, call, why.c_str());
    }
}
//@end

// Every CUDA call goes through CHECK: a failure names the call, the host thread and the
// step, and the program exits with status 1.
#define CHECK(call) check_call((call), #call, __FILE__, __LINE__)

// A kernel launch's own errors (bad configuration, a fault of an earlier kernel).
#define CHECK_LAUNCH(kernel) check_call(cudaGetLastError(), kernel, __FILE__, __LINE__)

// `a % b` of the program language: never negative (Euclid's).
static inline long emod(long a, long b) {
    long r = a % b;
    return r < 0 ? r + (b < 0 ? -b : b) : r;
}

// ---- the scenario's data ------------------------------------------------------------

struct Source {
    long cell;       // its cell (1D) or row (2D), global
    long c0, c1;     // its columns (2D; 0..1 in 1D)
    int hard;        // imposed (1) or added (0)
};

enum EndKind { END_NONE = 0, END_PEC = 1, END_MUR = 2 };

struct Scenario {
    bool plane = false;
    long cells = 0;   // cells (1D) or rows (2D): the axis the devices split
    long nx = 1;      // cells per row
    int periodic = 0; // 2D: whether the side columns wrap around
    long steps = 0;
    float ch = 0;     // the H curl coefficient
    int end_kind[2] = {END_NONE, END_NONE};  // cell 0's end and the last one's
    float end_mur[2] = {0, 0};                // 1D Mur coefficients (2D: data/mur.npy)
    std::vector<long> lo, hi;                 // each device's owned cells
    std::vector<Source> sources;
    std::vector<float> values;                // values[step * sources + i]
    std::vector<float> mur;                   // 2D: the bottom row's, then the top row's
};

static Scenario scenario;

static inline FILE *open_data(const std::string &path, const char *mode) {
    FILE *f = fopen(path.c_str(), mode);
    if (f == nullptr) {
        fprintf(stderr, "%s: cannot open it (%s): run ./halo in the folder the export wrote\n",
                path.c_str(), strerror(errno));
        exit(2);
    }
    return f;
}

[[noreturn]] static void bad_data(const std::string &path, const std::string &why) {
    fprintf(stderr, "%s: %s\n", path.c_str(), why.c_str());
    exit(2);
}

// A float written as its bits, 0x3f800000: read without rounding.
static inline float float_bits(const std::string &path, const char *word) {
    uint32_t bits = 0;
    if (sscanf(word, "0x%x", &bits) != 1) {
        bad_data(path, std::string("a float is written as its bits (0x…), not ") + word);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

// A float32 .npy file (C order): its values, and its shape in `shape`.
static inline std::vector<float> read_npy(const std::string &path, std::vector<long> *shape = nullptr) {
    FILE *f = open_data(path, "rb");
    char magic[10];
    if (fread(magic, 1, 10, f) != 10 || memcmp(magic, "\x93NUMPY", 6) != 0) {
        bad_data(path, "not a .npy file");
    }
    size_t len = (unsigned char)magic[8] | ((unsigned char)magic[9] << 8);
    std::string header(len, ' ');
    if (fread(&header[0], 1, len, f) != len || header.find("'<f4'") == std::string::npos ||
        header.find("'fortran_order': False") == std::string::npos) {
        bad_data(path, "not a float32 array in C order");
    }
    size_t open = header.find('('), close = header.find(')');
    std::vector<long> dims;
    long count = 1;
    for (size_t i = open + 1; i < close;) {
        char *end;
        long v = strtol(header.c_str() + i, &end, 10);
        size_t next = end - header.c_str();
        if (next == i) {
            i++;
            continue;
        }
        dims.push_back(v);
        count *= v;
        i = next;
    }
    std::vector<float> out(count);
    if (fread(out.data(), 4, count, f) != (size_t)count) {
        bad_data(path, "shorter than its shape says");
    }
    fclose(f);
    if (shape != nullptr) {
        *shape = dims;
    }
    return out;
}

static inline void write_npy(const std::string &path, const std::vector<float> &v, std::vector<long> shape) {
    std::string dims;
    for (size_t i = 0; i < shape.size(); i++) {
        dims += (i ? ", " : "") + std::to_string(shape[i]);
    }
    if (shape.size() == 1) {
        dims += ",";
    }
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
    header += std::string((64 - (10 + header.size() + 1) % 64) % 64, ' ') + "\n";
    FILE *f = fopen(path.c_str(), "wb");
    if (f == nullptr) {
        fprintf(stderr, "%s: cannot write it (%s)\n", path.c_str(), strerror(errno));
        exit(2);
    }
    unsigned char len[2] = {(unsigned char)(header.size() & 255), (unsigned char)(header.size() >> 8)};
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fwrite(len, 1, 2, f);
    fwrite(header.data(), 1, header.size(), f);
    fwrite(v.data(), 4, v.size(), f);
    fclose(f);
}

// data/scenario.txt: one `key values…` per line (# starts a comment).
static inline void read_scenario(const std::string &dir) {
    std::string path = dir + "/scenario.txt";
    FILE *f = open_data(path, "r");
    char line[512];
    Scenario &s = scenario;
    while (fgets(line, sizeof line, f) != nullptr) {
        char key[64] = "", a[64] = "", b[64] = "", c[64] = "", e[64] = "";
        int got = sscanf(line, "%63s %63s %63s %63s %63s", key, a, b, c, e);
        std::string k = key;
        if (got < 1 || k[0] == '#') {
            continue;
        } else if (k == "grid") {
            s.plane = std::string(a) == "plane";
            s.nx = got >= 3 ? atol(b) : 1;
            s.periodic = got >= 4 && std::string(c) == "periodic";
        } else if (k == "cells") {
            s.cells = atol(a);
        } else if (k == "steps") {
            s.steps = atol(a);
        } else if (k == "ch") {
            s.ch = float_bits(path, a);
        } else if (k == "end") {
            int side = std::string(a) == "right";
            std::string kind = b;
            s.end_kind[side] = kind == "pec" ? END_PEC : kind == "mur" ? END_MUR : END_NONE;
            s.end_mur[side] = got >= 4 ? float_bits(path, c) : 0.0f;
        } else if (k == "device") {
            s.lo.push_back(atol(b));
            s.hi.push_back(atol(c));
        } else if (k == "source") {
            s.sources.push_back({atol(a), atol(b), atol(c), std::string(e) == "hard"});
        } else {
            bad_data(path, "unknown key " + k);
        }
    }
    fclose(f);
    if (!s.sources.empty()) {
        std::vector<long> shape;
        s.values = read_npy(dir + "/sources.npy", &shape);
        if (shape.size() != 2 || shape[1] != (long)s.sources.size() || shape[0] < s.steps) {
            bad_data(dir + "/sources.npy", "not one row per step and one column per source");
        }
    }
    if (s.plane) {
        s.mur = read_npy(dir + "/mur.npy");
    }
}

static inline float source_value(size_t i, long step) {
    return scenario.values[step * scenario.sources.size() + i];
}

// ---- each logical device's memory ---------------------------------------------------

enum Field { ex, hy };

struct Device {
    int gpu = 0;
    long lo = 0, hi = 0; // owned cells (rows)
    long held = 0;       // cells held: owned and HALO each side
    float *e = nullptr, *h = nullptr, *ca = nullptr, *cb = nullptr, *prev = nullptr;
    //@if fused 1d
    float *prev_in = nullptr, *strip_ex = nullptr, *strip_hy = nullptr; // a fused pass's saves
    //@end
    //@if 2d
    float *mur = nullptr; // the Mur boundary's coefficients
    //@end
    //@if fused 2d
    float *snap_ez = nullptr, *snap_h = nullptr; // a fused pass's snapshots
    //@end
    bool peer[2] = {false, false}; // may its kernels store into the left / right neighbour?
};

static std::vector<Device> device;

// Floats per cell (row) of a field: 1 in 1D; nx of Ez and 2 nx of H (Hx, then Hy) in 2D.
static inline long width(Field f) {
    return scenario.plane ? (f == ex ? 1 : 2) * scenario.nx : 1;
}

static inline float *field(int dev, Field f) {
    return f == ex ? device[dev].e : device[dev].h;
}

// Global cell `i` of field `f` in device `dev`'s array, as a pointer (peer copies).
static inline float *cell(Field f, int dev, long i) {
    return field(dev, f) + (i + HALO - device[dev].lo) * width(f);
}

// Bytes of `count` cells of field `f`.
static inline size_t bytes(Field f, long count) {
    return (size_t)count * width(f) * sizeof(float);
}

//@if fused 1d
static inline long pass_strip_floats(long len) {
    return ((len + TILE - 1) / TILE + 3) * 2 * (MAX_STEPS + 1);
}
//@end

static inline float *zeroed(size_t floats) {
    float *p = nullptr;
    CHECK(cudaMalloc(&p, std::max<size_t>(floats, 1) * sizeof(float)));
    CHECK(cudaMemset(p, 0, std::max<size_t>(floats, 1) * sizeof(float)));
    return p;
}

static inline float *uploaded(const std::vector<float> &v) {
    float *p = zeroed(v.size());
    CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
    return p;
}

// Device `dev`'s arrays on its GPU (the current one), as the cuda runtime allocates them
// (src/runtime/cuda/buffers.rs): fields zero, coefficients from data/dev<d>.ca.npy and .cb.npy.
static inline void allocate(int dev, const std::string &dir) {
    Device &m = device[dev];
    m.held = m.hi - m.lo + 2 * HALO;
    long len = m.held * width(ex), hlen = m.held * width(hy);
    std::string at = dir + "/dev" + std::to_string(dev);
    std::vector<float> ca = read_npy(at + ".ca.npy"), cb = read_npy(at + ".cb.npy");
    if ((long)ca.size() != len || (long)cb.size() != len) {
        bad_data(at + ".ca.npy", "not one coefficient per float of the device's array");
    }
    m.e = zeroed(len);
    m.h = zeroed(hlen);
    m.ca = uploaded(ca);
    m.cb = uploaded(cb);
    //@if 2d
    m.prev = zeroed(2 * scenario.nx);
    m.mur = uploaded(scenario.mur);
    //@if fused
    m.snap_ez = zeroed(len + 2 * scenario.nx);
    m.snap_h = zeroed(hlen);
    //@end
    //@end
    //@if 1d
    m.prev = zeroed(2);
    //@if fused
    m.prev_in = zeroed(4);
    m.strip_ex = zeroed(2 * pass_strip_floats(len));
    m.strip_hy = zeroed(2 * pass_strip_floats(len));
    //@end
    //@end
}

// The folder the fields go to (made if it is not there).
static inline void mkdir_for(const std::string &dir) {
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "%s: cannot make the folder (%s)\n", dir.c_str(), strerror(errno));
        exit(2);
    }
}

// The owned cells of every device, gathered, written as haloscope's --dump-fields does:
// ex.npy and hy.npy (1D), ez.npy, hx.npy and hy.npy of shape (ny, nx) (2D).
static inline void dump_fields(const std::string &out) {
    const Scenario &s = scenario;
    long nx = s.nx;
    std::vector<float> e, hx, hy_out;
    for (size_t d = 0; d < device.size(); d++) {
        const Device &m = device[d];
        CHECK(cudaSetDevice(m.gpu));
        long owned = m.hi - m.lo;
        std::vector<float> a(owned * width(ex)), b(owned * width(hy));
        CHECK(cudaMemcpy(a.data(), cell(ex, d, m.lo), bytes(ex, owned), cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(b.data(), cell(hy, d, m.lo), bytes(hy, owned), cudaMemcpyDeviceToHost));
        e.insert(e.end(), a.begin(), a.end());
        if (!s.plane) {
            hy_out.insert(hy_out.end(), b.begin(), b.end());
            continue;
        }
        for (long r = 0; r < owned; r++) {
            hx.insert(hx.end(), b.begin() + 2 * r * nx, b.begin() + (2 * r + 1) * nx);
            hy_out.insert(hy_out.end(), b.begin() + (2 * r + 1) * nx, b.begin() + (2 * r + 2) * nx);
        }
    }
    if (s.plane) {
        write_npy(out + "/ez.npy", e, {s.cells, nx});
        write_npy(out + "/hx.npy", hx, {s.cells, nx});
        write_npy(out + "/hy.npy", hy_out, {s.cells, nx});
    } else {
        write_npy(out + "/ex.npy", e, {s.cells});
        write_npy(out + "/hy.npy", hy_out, {s.cells});
    }
}

// ---- where a kernel works (src/decomp.rs `kernel_range`) ------------------------------

// Local cells a..z of a device's array.
struct Span {
    long a, z;
    bool empty() const { return a >= z; }
    long len() const { return empty() ? 0 : z - a; }
    bool contains(long i) const { return i >= a && i < z; }
};

enum Defined { ON_H, ON_E, ON_ALL }; // update_h, update_e, everything else

// The local cells a kernel launched over global from..to works on: the held cells where
// it is defined. update_h reads Ex one cell on, update_e Hy one back.
static inline Span kernel_range(int dev, Defined k, long from, long to) {
    const Device &m = device[dev];
    long n = scenario.cells;
    long vlo = k == ON_E ? 1 : 0, vhi = k == ON_ALL ? n : n - 1;
    long a = std::max(std::max(from, std::max(m.lo - HALO, 0L)), vlo);
    long b = std::min(std::min(to, m.hi + HALO), vhi);
    Span r = a >= b ? Span{0, 0} : Span{a + HALO - m.lo, b + HALO - m.lo};
    if (k == ON_H) {
        r.z = std::min(r.z, m.held - 1);
    } else if (k == ON_E) {
        r = Span{std::max(r.a, 1L), std::max(r.z, 1L)};
    }
    return r;
}

// Local index of a source held by device `dev` (-1 when it holds none).
static inline long source_local(int dev, const Source &src) {
    const Device &m = device[dev];
    bool held = src.cell >= std::max(m.lo - HALO, 0L) && src.cell < m.hi + HALO;
    return held ? src.cell + HALO - m.lo : -1;
}

// The grid ends device `dev` holds: kind and local cell (END_NONE where it holds none).
static inline void held_ends(int dev, int kind[2], long at[2]) {
    const Device &m = device[dev];
    kind[0] = m.lo == 0 ? scenario.end_kind[0] : END_NONE;
    kind[1] = m.hi == scenario.cells ? scenario.end_kind[1] : END_NONE;
    at[0] = HALO;
    at[1] = HALO + (m.hi - m.lo) - 1;
}

// Blocks of `per` threads for `count` items.
static inline unsigned blocks_of(long count, long per) {
    return (unsigned)((count + per - 1) / per);
}

//@if 2d
static const long MAX_ROWS = 65535; // a 2D launch's rows (gridDim.y) at most

// Rows r in launches of at most MAX_ROWS rows each (none when r is empty).
static inline std::vector<Span> row_launches(Span r) {
    std::vector<Span> out;
    for (long a = r.a; a < r.z; a += MAX_ROWS) {
        out.push_back(Span{a, std::min(r.z, a + MAX_ROWS)});
    }
    return out;
}

// The grid of a 2D launch over `rows`: one block of BLOCK threads for each BLOCK columns
// of each row.
static inline dim3 grid_2d(Span rows) {
    return dim3(blocks_of(scenario.nx, BLOCK), (unsigned)rows.len());
}
//@end

// ---- the launches main.cu does not write out: launch::sources_boundaries(…) and the
// fused passes, by the program language's names ------------------------------------------

namespace launch {

// sources_boundaries<<<…>>>(from, to, step): the sources of step `step` on the held part of
// from..to, then the grid's ends among those cells (and, in 2D, the PEC side columns).
static inline void sources_boundaries(int dev, cudaStream_t s, long from, long to, long step) {
    Device &m = device[dev];
    const Scenario &sc = scenario;
    Span r = kernel_range(dev, ON_ALL, from, to);
    if (r.empty()) {
        return;
    }
    for (size_t i = 0; i < sc.sources.size(); i++) {
        long at = source_local(dev, sc.sources[i]);
        if (at < 0 || !r.contains(at)) {
            continue;
        }
        float v = source_value(i, step);
        int hard = sc.sources[i].hard;
        //@if 1d
        apply_source<<<1, 1, 0, s>>>(m.e, (unsigned)at, v, hard);
        CHECK_LAUNCH("apply_source");
        //@end
        //@if 2d
        long count = sc.sources[i].c1 - sc.sources[i].c0;
        float *cells = m.e + at * sc.nx + sc.sources[i].c0;
        apply_source_2d<<<blocks_of(count, BLOCK), BLOCK, 0, s>>>(cells, count, v, hard);
        CHECK_LAUNCH("apply_source_2d");
        //@end
    }
    int kind[2];
    long end[2];
    held_ends(dev, kind, end);
    for (int side = 0; side < 2; side++) {
        kind[side] = r.contains(end[side]) ? kind[side] : END_NONE;
    }
    if (kind[0] != END_NONE || kind[1] != END_NONE) {
        //@if 1d
        float lm = kind[0] == END_MUR ? sc.end_mur[0] : 0.0f;
        float rm = kind[1] == END_MUR ? sc.end_mur[1] : 0.0f;
        boundaries<<<1, 1, 0, s>>>(m.e, m.prev, end[0], end[1], kind[0], lm, kind[1], rm);
        CHECK_LAUNCH("boundaries");
        //@end
        //@if 2d
        end_rows_2d<<<blocks_of(sc.nx, BLOCK), BLOCK, 0, s>>>(m.e, m.prev, m.mur, sc.nx, end[0], end[1],
                                                               kind[0], kind[1]);
        CHECK_LAUNCH("end_rows_2d");
        //@end
    }
    //@if 2d
    if (!sc.periodic) {
        pec_sides_2d<<<blocks_of(r.len(), BLOCK), BLOCK, 0, s>>>(m.e, sc.nx, r.a, r.len());
        CHECK_LAUNCH("pec_sides_2d");
    }
    //@end
}

//@if fused
// ---- 1D fused passes (src/fused.rs, src/runtime/cuda/wide.rs) ---------------------------

enum Tiles { ALL, BOUNDARY, INTERIOR, STORE };
//@if 1d

// A pass over `len` cells in tiles: (e, tiles saved, blocks, first, jump) of fused.cu.
struct Tiling {
    long e, tiles, blocks, first, jump;
};

static inline Tiling tiling(long len, long steps, Tiles which) {
    if (which == ALL) {
        long t = (len + TILE - 1) / TILE;
        return {0, t, t, 0, 0};
    }
    long e = 2 * steps;
    long c1 = std::min(e, len), c2 = std::max(len - e, c1);
    long m = (c2 - c1 + TILE - 1) / TILE;
    if (which == BOUNDARY) {
        return {e, m + 2, 2, 0, m};
    }
    if (which == INTERIOR) {
        return {e, m + 2, m, 1, 0};
    }
    return {e, m + 2, m + 2, 0, 0};
}

// fused_save: the margins of every tile (and the Mur state) as the pass begins.
static inline void save_margins(int dev, cudaStream_t s, Span r, long steps, bool split) {
    const Device &m = device[dev];
    long len = r.len(), margin = steps + 1;
    Tiling t = tiling(len, steps, split ? INTERIOR : ALL);
    long off = split ? pass_strip_floats(len) : 0;
    fused_edges<<<t.tiles + 1, 2 * margin, 0, s>>>(m.e + r.a, m.h + r.a, m.prev, m.strip_ex + off,
                                                   m.strip_hy + off, m.prev_in + (split ? 2 : 0),
                                                   len, margin, t.e);
    CHECK_LAUNCH("fused_edges");
}

// The pass's tiles `which`, `steps` steps from step `step`; a fused_store pass's stores.
static inline void run_tiles(int dev, cudaStream_t s, Span r, long steps, long step, Tiles which) {
    const Device &m = device[dev];
    const Scenario &sc = scenario;
    long off = r.a, len = r.len();
    Tiling t = tiling(len, steps, which);
    if (t.blocks == 0) {
        return;
    }
    long so = which == ALL ? 0 : pass_strip_floats(len);
    const float *prev_in = m.prev_in + (which == ALL ? 0 : 2);
    auto rel = [&](Span v, long *a, long *z) {
        *a = std::min(std::max(v.a, r.a), r.z) - off;
        *z = std::max(std::min(std::max(v.z, r.a), r.z) - off, *a);
    };
    long h_lo, h_hi, e_lo, e_hi;
    rel(kernel_range(dev, ON_H, 0, LONG_MAX), &h_lo, &h_hi);
    rel(kernel_range(dev, ON_E, 0, LONG_MAX), &e_lo, &e_hi);
    int kind[2];
    long end[2];
    held_ends(dev, kind, end);
    for (int side = 0; side < 2; side++) {
        kind[side] = r.contains(end[side]) ? kind[side] : END_NONE;
        end[side] = kind[side] == END_NONE ? 0 : end[side] - off;
    }
    float lm = kind[0] == END_MUR ? sc.end_mur[0] : 0.0f;
    float rm = kind[1] == END_MUR ? sc.end_mur[1] : 0.0f;
    Sources src;
    memset(&src, 0, sizeof src);
    for (size_t i = 0; i < sc.sources.size() && src.n < MAX_SOURCES; i++) {
        long at = source_local(dev, sc.sources[i]);
        if (at < 0 || !r.contains(at)) {
            continue;
        }
        for (long k = 0; k < steps; k++) {
            src.value[k][src.n] = source_value(i, step + k);
        }
        src.pos[src.n] = at - off;
        src.hard[src.n] = sc.sources[i].hard;
        src.n++;
    }
    long own_lo = 0, own_hi = len, store_n = 0;
    float *l_ex = nullptr, *l_hy = nullptr, *r_ex = nullptr, *r_hy = nullptr;
    if (which == STORE) {
        rel(Span{HALO, HALO + (m.hi - m.lo)}, &own_lo, &own_hi);
        store_n = m.lo > 0 || m.hi < sc.cells ? std::min(steps, m.hi - m.lo) : 0;
        if (m.lo > 0) {
            if (!m.peer[0]) {
                fail(__FILE__, __LINE__, "fused_store", "no peer access to the left neighbour's GPU");
            }
            l_ex = cell(ex, dev - 1, m.lo);
            l_hy = cell(hy, dev - 1, m.lo);
        }
        if (m.hi < sc.cells) {
            if (!m.peer[1]) {
                fail(__FILE__, __LINE__, "fused_store", "no peer access to the right neighbour's GPU");
            }
            r_ex = cell(ex, dev + 1, m.hi - store_n);
            r_hy = cell(hy, dev + 1, m.hi - store_n);
        }
    }
    ::fused_steps<<<t.blocks, FUSED_THREADS, 0, s>>>(
        m.e + off, m.h + off, m.ca + off, m.cb + off, m.prev, prev_in, m.strip_ex + so,
        m.strip_hy + so, src, len, steps, sc.ch, h_lo, h_hi, e_lo, e_hi, kind[0], end[0], lm, kind[1],
        end[1], rm, t.e, t.first, t.jump, own_lo, own_hi, store_n, l_ex, l_hy, r_ex, r_hy);
    CHECK_LAUNCH("fused_steps");
}

//@end
//@if 2d
// ---- 2D fused passes (src/geometry/plane/fused.rs, src/runtime/cuda/plane.rs) ----------

static inline void copy_rows(int dev, cudaStream_t s, bool to_snapshot, long a, long z) {
    const Device &m = device[dev];
    long nx = scenario.nx;
    float *fe = m.e, *fh = m.h, *fp = m.prev;
    float *se = m.snap_ez, *sh = m.snap_h, *sp = m.snap_ez + m.held * nx;
    auto copy = [&](float *to, const float *from, long floats) {
        CHECK(cudaMemcpyAsync(to, from, floats * sizeof(float), cudaMemcpyDeviceToDevice, s));
    };
    if (to_snapshot) {
        copy(se + a * nx, fe + a * nx, (z - a) * nx);
        copy(sh + 2 * a * nx, fh + 2 * a * nx, 2 * (z - a) * nx);
        copy(sp, fp, 2 * nx);
    }
}

static inline void steps_2d(int dev, cudaStream_t s, long from, long to, long step, long steps);

// A 2D pass of `steps` steps over rows from..to: passes of STEPS_2D steps at most, each
// reading the fields one pass wrote and writing the other (the snapshot), the last into
// the fields.
static inline void fused_pass_2d(int dev, cudaStream_t s, long from, long to, long step, long steps) {
    const Device &m = device[dev];
    const Scenario &sc = scenario;
    Span h = kernel_range(dev, ON_H, from, to), e = kernel_range(dev, ON_E, from, to);
    Span sp = kernel_range(dev, ON_ALL, from, to);
    long w0 = LONG_MAX, w1 = LONG_MIN;
    for (Span v : {h, e, sp}) {
        if (!v.empty()) {
            w0 = std::min(w0, v.a);
            w1 = std::max(w1, v.z);
        }
    }
    if (w0 == LONG_MAX) {
        return;
    }
    std::vector<size_t> on;
    for (size_t i = 0; i < sc.sources.size(); i++) {
        long at = source_local(dev, sc.sources[i]);
        if (at >= 0 && sp.contains(at)) {
            on.push_back(i);
        }
    }
    if (on.size() > MAX_SOURCES) {
        steps_2d(dev, s, from, to, step, steps);
        return;
    }
    int kind[2];
    long end[2];
    held_ends(dev, kind, end);
    for (int side = 0; side < 2; side++) {
        kind[side] = sp.contains(end[side]) ? kind[side] : END_NONE;
    }
    long nx = sc.nx, held = m.held;
    dim3 grid(blocks_of(nx, TILE_2D_X), blocks_of(w1 - w0, TILE_2D_Y));
    long passes = (steps + STEPS_2D - 1) / STEPS_2D;
    for (long i = 0, t0 = 0; t0 < steps; i++, t0 += STEPS_2D) {
        long k = std::min(steps - t0, (long)STEPS_2D);
        bool into_fields = (passes - i) % 2 == 1;
        if (i == 0 && into_fields) {
            copy_rows(dev, s, true, std::max(w0 - (k + 1), 0L), std::min(w1 + k + 1, held));
        }
        float *fe = m.e, *fh = m.h, *fp = m.prev;
        float *se = m.snap_ez, *sh = m.snap_h, *spv = m.snap_ez + held * nx;
        float *oe = into_fields ? fe : se, *oh = into_fields ? fh : sh, *op = into_fields ? fp : spv;
        float *ie = into_fields ? se : fe, *ih = into_fields ? sh : fh, *ip = into_fields ? spv : fp;
        Sources2d src;
        memset(&src, 0, sizeof src);
        for (size_t j = 0; j < on.size(); j++) {
            const Source &x = sc.sources[on[j]];
            for (long t = 0; t < k; t++) {
                src.value[t][j] = source_value(on[j], step + t0 + t);
            }
            src.row[j] = source_local(dev, x);
            src.c0[j] = x.c0;
            src.c1[j] = x.c1;
            src.hard[j] = x.hard;
        }
        src.n = on.size();
        fused_steps_2d<<<grid, THREADS_2D, SHARED_2D, s>>>(
            oe, oh, ie, ih, m.ca, m.cb, op, ip, m.mur, src, nx, sc.periodic, sc.ch, k, held, w0, w1,
            w0, w1, h.a, h.z, e.a, e.z, sp.a, sp.z, end[0], end[1], kind[0], kind[1]);
        CHECK_LAUNCH("fused_steps_2d");
    }
}

// More sources in a pass than fused_steps_2d takes: the pass one step at a time, as
// main.cu writes a two-kernel step.
static inline void steps_2d(int dev, cudaStream_t s, long from, long to, long step, long steps) {
    const Device &m = device[dev];
    const Scenario &sc = scenario;
    for (long t = 0; t < steps; t++) {
        for (Span r : row_launches(kernel_range(dev, ON_H, from, to))) {
            update_h_2d<<<grid_2d(r), BLOCK, 0, s>>>(m.h, m.e, sc.ch, sc.nx, r.a, r.len(), sc.periodic);
            CHECK_LAUNCH("update_h_2d");
        }
        for (Span r : row_launches(kernel_range(dev, ON_E, from, to))) {
            update_e_2d<<<grid_2d(r), BLOCK, 0, s>>>(m.e, m.h, m.ca, m.cb, sc.nx, r.a, r.len(),
                                                     sc.periodic);
            CHECK_LAUNCH("update_e_2d");
        }
        sources_boundaries(dev, s, from, to, step + t);
    }
}

// A 2D fused_store pass's stores: the rows of both fields at each end of my cells into
// the neighbours' halos (peer stores, a kernel).
static inline void store_rows_2d(int dev, cudaStream_t s, long steps) {
    const Device &m = device[dev];
    long k = std::min(steps, m.hi - m.lo);
    for (int side = 0; side < 2; side++) {
        bool there = side == 0 ? m.lo > 0 : m.hi < scenario.cells;
        if (!there) {
            continue;
        }
        if (!m.peer[side]) {
            fail(__FILE__, __LINE__, "fused_store", "no peer access to the neighbour's GPU");
        }
        int to = side == 0 ? dev - 1 : dev + 1;
        long first = side == 0 ? m.lo : m.hi - k;
        long na = k * width(ex), nb = k * width(hy);
        unsigned grid = std::min(blocks_of(na + nb, BLOCK), 1024u);
        store_rows<<<grid, BLOCK, 0, s>>>(cell(ex, dev, first), cell(ex, to, first), na,
                                          cell(hy, dev, first), cell(hy, to, first), nb);
        CHECK_LAUNCH("store_rows");
    }
}

//@end
// ---- the fused kernels of the program language ----------------------------------------

// fused_steps<<<…>>>(from, to, steps): `steps` steps over the held part of from..to in one
// pass over memory; the cells within `steps` of the span's ends come out stale.
static inline void fused_steps(int dev, cudaStream_t s, long from, long to, long steps, long step) {
    //@if 2d
    if (scenario.plane) {
        fused_pass_2d(dev, s, from, to, step, steps);
        return;
    }
    //@end
    //@if 1d
    Span r = kernel_range(dev, ON_ALL, from, to);
    if (r.empty()) {
        return;
    }
    save_margins(dev, s, r, steps, false);
    run_tiles(dev, s, r, steps, step, ALL);
    //@end
}

// fused_save<<<…>>>(from, to, steps): a split pass begins: its margins saved (in 2D the
// whole pass runs here; its parts then run nothing).
static inline void fused_save(int dev, cudaStream_t s, long from, long to, long steps, long step) {
    (void)step;  // a 1D save runs no step
    //@if 2d
    if (scenario.plane) {
        fused_pass_2d(dev, s, from, to, step, steps);
        return;
    }
    //@end
    //@if 1d
    Span r = kernel_range(dev, ON_ALL, from, to);
    if (!r.empty()) {
        save_margins(dev, s, r, steps, true);
    }
    //@end
}

static inline void fused_part(int dev, cudaStream_t s, long from, long to, long steps, long step, Tiles part) {
    (void)step;  // in 2D the parts run no step
    Span r = kernel_range(dev, ON_ALL, from, to);
    if (r.empty()) {
        return;
    }
    //@if 2d
    if (scenario.plane) {
        if (part == STORE) {
            store_rows_2d(dev, s, steps);
        }
        return;
    }
    //@end
    //@if 1d
    run_tiles(dev, s, r, steps, step, part);
    //@end
}

// fused_boundary / fused_interior / fused_store<<<…>>>(from, to, steps): a split pass's
// boundary tiles, its interior tiles, or every tile with the end cells stored into the
// neighbours' halos.
static inline void fused_boundary(int dev, cudaStream_t s, long from, long to, long steps, long step) {
    fused_part(dev, s, from, to, steps, step, BOUNDARY);
}
static inline void fused_interior(int dev, cudaStream_t s, long from, long to, long steps, long step) {
    fused_part(dev, s, from, to, steps, step, INTERIOR);
}
static inline void fused_store(int dev, cudaStream_t s, long from, long to, long steps, long step) {
    fused_part(dev, s, from, to, steps, step, STORE);
}
//@end

} // namespace launch

//@if flags
// ---- flags: stream memory operations, through the runtime's driver entry points -------

struct Driver {
    CUresult (*cuStreamWaitValue32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
    CUresult (*cuStreamWriteValue32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
};

static Driver driver;

static inline void load_driver() {
    cudaDriverEntryPointQueryResult found;
    void *p = nullptr;
    CHECK(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &p, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess) {
        fail(__FILE__, __LINE__, "cudaGetDriverEntryPointByVersion", "no cuStreamWaitValue32");
    }
    driver.cuStreamWaitValue32 = (CUresult(*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int))p;
    CHECK(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &p, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess) {
        fail(__FILE__, __LINE__, "cudaGetDriverEntryPointByVersion", "no cuStreamWriteValue32");
    }
    driver.cuStreamWriteValue32 = (CUresult(*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int))p;
}

// A flag's value `iter + c`: below 0 is 0 (no wait for less is ever unmet).
static inline cuuint32_t flag_value(long v) {
    return (cuuint32_t)std::min(std::max(v, 0L), (long)UINT32_MAX);
}

// A flag word (zero) in the current GPU's memory.
static inline CUdeviceptr flag_word() {
    return (CUdeviceptr)zeroed(1);
}

// Threads that order each other by flags alone may run ahead: at most RUN_AHEAD rounds
// (more queued behind a wait could hold the hardware queues its writer needs).
static const long RUN_AHEAD = 8;
static std::atomic<long> rounds_issued[4096];

static inline void keep_up(int d, long iter) {
    rounds_issued[d].store(iter, std::memory_order_release);
    for (size_t o = 0; o < device.size(); o++) {
        while (rounds_issued[o].load(std::memory_order_acquire) + RUN_AHEAD < iter) {
            std::this_thread::yield();
        }
    }
}
//@end

// Waits until every GPU has done the set-up's work: the memsets and copies went to the
// default stream, which the program's streams (cudaStreamNonBlocking) do not wait for; a
// flag zeroed late would undo its first write.
static inline void set_up_done() {
    for (size_t d = 0; d < device.size(); d++) {
        CHECK(cudaSetDevice(device[d].gpu));
        CHECK(cudaDeviceSynchronize());
    }
}

// Every kernel loaded on the current GPU now, not at its first launch: with lazy loading
// (CUDA 12.2's default) a first launch waits for the GPU's pending work.
//@if flags
// A thread's first fused_store, issued behind flag waits that only its own later calls
// satisfy, would wait for ever.
//@end
static inline void load_kernels() {
    const void *kernels[] = {
        //@if 1d
        (const void *)::update_h, (const void *)::update_e, (const void *)apply_source,
        (const void *)boundaries,
        //@end
        //@if 2d
        (const void *)update_h_2d, (const void *)update_e_2d, (const void *)apply_source_2d,
        (const void *)end_rows_2d, (const void *)pec_sides_2d,
        //@end
        //@if fused 1d
        (const void *)fused_edges, (const void *)::fused_steps,
        //@end
        //@if fused 2d
        (const void *)store_rows, (const void *)fused_steps_2d,
        //@end
    };
    for (const void *k : kernels) {
        cudaFuncAttributes a;
        CHECK(cudaFuncGetAttributes(&a, k));
    }
    //@if fused 2d
    CHECK(cudaFuncSetAttribute(fused_steps_2d, cudaFuncAttributeMaxDynamicSharedMemorySize, SHARED_2D));
    //@end
}

// ---- set-up -----------------------------------------------------------------------------

// Every device's memory on its GPU, and peer access between neighbours on distinct GPUs.
static inline void set_up(const std::string &dir, const std::vector<int> &gpu) {
    read_scenario(dir);
    size_t n = scenario.lo.size();
    if (gpu.size() != n) {
        fprintf(stderr, "%zu GPUs given for %zu devices\n", gpu.size(), n);
        exit(2);
    }
    device.assign(n, Device{});
    for (size_t d = 0; d < n; d++) {
        device[d].gpu = gpu[d];
        device[d].lo = scenario.lo[d];
        device[d].hi = scenario.hi[d];
        CHECK(cudaSetDevice(gpu[d]));
        allocate(d, dir);
        load_kernels();
    }
    for (size_t d = 0; d < n; d++) {
        for (int side = 0; side < 2; side++) {
            long o = side == 0 ? (long)d - 1 : (long)d + 1;
            if (o < 0 || o >= (long)n) {
                continue;
            }
            int a = gpu[d], b = gpu[o];
            int can = a == b;
            if (!can) {
                CHECK(cudaDeviceCanAccessPeer(&can, a, b));
                if (can) {
                    CHECK(cudaSetDevice(a));
                    cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
                    if (e == cudaErrorPeerAccessAlreadyEnabled) {
                        cudaGetLastError();
                    } else {
                        CHECK(e);
                    }
                }
            }
            device[d].peer[side] = can;
        }
    }
    CHECK(cudaGetLastError());
}

// ---- NCCL (programs that send their halos as NCCL messages) -------------------------
#ifdef HALO_NCCL
#include <nccl.h>

static inline void check_call(ncclResult_t e, const char *call, const char *file, int line) {
    if (e != ncclSuccess) {
        std::string why = std::string(ncclGetErrorString(e));
        const char *last = ncclGetLastError(nullptr);
        if (last && *last) why += std::string(": ") + last;
        fail(file, line, call, why.c_str());
    }
}

// One communicator per device, rank d on GPU gpuMapping[d].
static std::vector<ncclComm_t> comms;

// The communicators of every device, made at once by this one host thread. NCCL refuses
// two ranks on one GPU, so each device needs its own GPU.
static inline void start_nccl(const int *gpus, int count) {
    for (int d = 0; d < count; d++) {
        for (int o = 0; o < d; o++) {
            if (gpus[o] == gpus[d]) {
                fprintf(stderr,
                        "--gpus: devices %d and %d are both on GPU %d; NCCL refuses two ranks on one "
                        "GPU: give each device its own GPU\n",
                        o, d, gpus[d]);
                std::exit(2);
            }
        }
    }
    comms.resize(count);
    CHECK(ncclCommInitAll(comms.data(), count, gpus));
}

static inline void stop_nccl() {
    for (ncclComm_t c : comms) CHECK(ncclCommDestroy(c));
}

// `count` cells (rows in 2D) of field `f`, as the floats NCCL counts.
static inline size_t floats(Field f, long count) {
    return (size_t)count * width(f);
}
#endif
