// The snapshot reduction keeps NaN and ±inf (issue 13): a blown-up field must show in the
// columns the UI gets, or the UI would keep drawing finite extremes and call the run
// bit-identical. Runs kernels/reduce.cu as the cuda runtime does (BLOCK from
// src/kernels.rs) on columns of several chunks, with one NaN, one +inf, one -inf, and
// checks every column's extremes.
//
//   nvcc -O2 -DBLOCK=256 -o reduce-nan scripts/reduce-nan.cu && ./reduce-nan
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#include "../kernels/reduce.cu"

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

int main() {
  const unsigned columns = 4, chunks = 8, per = 100000, n = columns * per;
  std::vector<float> ex(n), hy(n);
  for (unsigned i = 0; i < n; i++) {
    ex[i] = std::sin(0.001f * i);
    hy[i] = std::cos(0.001f * i);
  }
  // Column 1: a NaN in Ex deep inside a chunk; column 2: +inf in Hy; column 3: -inf in Ex.
  ex[per + 12345] = NAN;
  hy[2 * per + 777] = INFINITY;
  ex[3 * per + 99999] = -INFINITY;
  std::vector<unsigned> edges(columns + 1);
  for (unsigned c = 0; c <= columns; c++) edges[c] = c * per;
  float *d_ex, *d_hy, *d_out;
  unsigned *d_edges;
  CK(cudaMalloc(&d_ex, 4 * n));
  CK(cudaMalloc(&d_hy, 4 * n));
  CK(cudaMalloc(&d_out, 4 * 4 * columns * chunks));
  CK(cudaMalloc(&d_edges, 4 * (columns + 1)));
  CK(cudaMemcpy(d_ex, ex.data(), 4 * n, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_hy, hy.data(), 4 * n, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_edges, edges.data(), 4 * (columns + 1), cudaMemcpyHostToDevice));
  reduce_columns<<<dim3(columns, chunks), BLOCK>>>(d_ex, d_hy, d_edges, columns, d_out);
  CK(cudaGetLastError());
  std::vector<float> out(4 * columns * chunks);
  CK(cudaMemcpy(out.data(), d_out, 4 * out.size(), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (unsigned c = 0; c < columns; c++) {
    // Merge the column's chunks as the host does (NaN kept).
    float v[4] = {INFINITY, -INFINITY, INFINITY, -INFINITY};
    for (unsigned k = 0; k < chunks; k++) {
      const float *o = &out[4 * (c * chunks + k)];
      for (int j = 0; j < 4; j++) {
        bool lo = j % 2 == 0;
        if (std::isnan(v[j]) || std::isnan(o[j])) v[j] = NAN;
        else v[j] = lo ? std::fmin(v[j], o[j]) : std::fmax(v[j], o[j]);
      }
    }
    bool finite = std::isfinite(v[0]) && std::isfinite(v[1]) && std::isfinite(v[2]) && std::isfinite(v[3]);
    bool expect_finite = c == 0;
    bool ok = finite == expect_finite;
    if (c == 1) ok = ok && (std::isnan(v[0]) || std::isnan(v[1]));
    if (c == 2) ok = ok && v[3] == INFINITY;
    if (c == 3) ok = ok && v[0] == -INFINITY;
    std::printf("column %u: Ex %g..%g Hy %g..%g %s\n", c, v[0], v[1], v[2], v[3], ok ? "ok" : "WRONG");
    bad += !ok;
  }
  std::printf("reduce-nan: %s\n", bad ? "FAIL" : "PASS");
  return bad ? 1 : 0;
}
