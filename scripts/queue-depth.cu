// How much asynchronous work one CUDA stream accepts before the issuing call blocks, and
// when a blocked call returns. The figures behind the sim's `[cost] queue_depth` (DESIGN.md).
//
//   nvcc -O2 -o queue-depth scripts/queue-depth.cu && ./queue-depth
//
// For each kind of call: a kernel spins for BLOCK_MS on a stream, then the host issues
// calls of that kind on the same stream, timing each one. The first call that takes over
// 1 ms is the one the driver blocked: the number before it is the depth. A second test
// queues spin kernels of SPIN_US each behind the blocker; after the blocker ends, each
// blocked launch returns when an earlier kernel completes: the test finds which one
// (kernel k - j for the j that fits best) from the kernels' own end times.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

static const double BLOCK_MS = 400.0;
static const int MAX_CALLS = 20000;

__device__ __forceinline__ unsigned long long gtime() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins for `ns` nanoseconds; writes its end time (globaltimer, ns) to out[i] if out.
__global__ void spin(unsigned long long ns, unsigned long long *out, int i) {
  unsigned long long t0 = gtime();
  while (gtime() - t0 < ns) {
  }
  if (out) out[i] = gtime();
}

__global__ void empty() {}

static double now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

// Issues `call(i)` until one blocks (> 1 ms); returns the number accepted before it.
template <class F> static int depth(cudaStream_t s, F call) {
  spin<<<1, 1, 0, s>>>((unsigned long long)(BLOCK_MS * 1e6), nullptr, 0);
  CK(cudaGetLastError());
  int accepted = -1;
  for (int i = 0; i < MAX_CALLS; i++) {
    double t0 = now_us();
    call(i);
    if (now_us() - t0 > 1000.0) {
      accepted = i;
      break;
    }
  }
  CK(cudaStreamSynchronize(s));
  return accepted;
}

int main() {
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  int drv = 0;
  CK(cudaDriverGetVersion(&drv));
  std::printf("gpu: %s x%d, driver API %d\n", p.name, n, drv);
  CK(cudaSetDevice(0));
  cudaStream_t s, other;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  cudaEvent_t ev, done;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  CK(cudaEventRecord(done, other));
  CK(cudaStreamSynchronize(other));
  float *a0 = nullptr, *a1 = nullptr;
  CK(cudaMalloc(&a0, 4096));

  std::printf("%-34s %s\n", "call on a stream behind a kernel", "accepted before the call blocks");
  int k = depth(s, [&](int) { empty<<<1, 1, 0, s>>>(); });
  std::printf("%-34s %d\n", "kernel launch (empty)", k);
  k = depth(s, [&](int) { CK(cudaEventRecord(ev, s)); });
  std::printf("%-34s %d\n", "cudaEventRecord", k);
  k = depth(s, [&](int) { CK(cudaStreamWaitEvent(s, done, 0)); });
  std::printf("%-34s %d\n", "cudaStreamWaitEvent (complete)", k);
  k = depth(s, [&](int i) { empty<<<1, 1, 0, s>>>(); if (i % 2) CK(cudaEventRecord(ev, s)); });
  std::printf("%-34s %d\n", "launch, record alternately (calls)", k);
  k = depth(s, [&](int) { CK(cudaMemcpyAsync(a0, a0 + 512, 4, cudaMemcpyDeviceToDevice, s)); });
  std::printf("%-34s %d\n", "cudaMemcpyAsync 4 B on-device", k);

  // A one-node graph.
  {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(other, cudaStreamCaptureModeThreadLocal));
    empty<<<1, 1, 0, other>>>();
    CK(cudaStreamEndCapture(other, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    k = depth(s, [&](int) { CK(cudaGraphLaunch(ge, s)); });
    std::printf("%-34s %d\n", "cudaGraphLaunch (1 kernel node)", k);
  }

  if (n >= 2) {
    int can = 0;
    CK(cudaDeviceCanAccessPeer(&can, 0, 1));
    if (can) cudaDeviceEnablePeerAccess(1, 0);
    CK(cudaSetDevice(1));
    CK(cudaMalloc(&a1, 4096));
    if (can) cudaDeviceEnablePeerAccess(0, 0);
    cudaStream_t s1;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CK(cudaSetDevice(0));
    // Pull: on the destination's stream. Push: on the source's stream.
    k = depth(s, [&](int) { CK(cudaMemcpyPeerAsync(a0, 0, a1, 1, 4, s)); });
    std::printf("%-34s %d\n", "cudaMemcpyPeerAsync 4 B (pull)", k);
    CK(cudaSetDevice(1));
    k = depth(s1, [&](int) { CK(cudaMemcpyPeerAsync(a0, 0, a1, 1, 4, s1)); });
    std::printf("%-34s %d\n", "cudaMemcpyPeerAsync 4 B (push)", k);
    CK(cudaSetDevice(0));
  } else {
    std::printf("peer copies: one GPU only, not measured\n");
  }

  // When does a blocked launch return? Spin kernels of SPIN_US behind the blocker.
  const double SPIN_US = 50.0;
  const int N = 6000;
  unsigned long long *ends = nullptr;
  CK(cudaHostAlloc(&ends, N * sizeof(unsigned long long), cudaHostAllocMapped));
  unsigned long long *dends = nullptr;
  CK(cudaHostGetDevicePointer(&dends, ends, 0));
  // Clock offset: a kernel writes globaltimer, the host reads its clock after the sync.
  std::vector<double> offs;
  for (int r = 0; r < 20; r++) {
    double h0 = now_us();
    spin<<<1, 1, 0, s>>>(0, dends, 0);
    CK(cudaStreamSynchronize(s));
    double h1 = now_us();
    offs.push_back(0.5 * (h0 + h1) - ends[0] / 1e3);
  }
  std::sort(offs.begin(), offs.end());
  double off = offs[offs.size() / 2];
  std::vector<double> ret(N, 0.0);
  spin<<<1, 1, 0, s>>>((unsigned long long)(100e6), nullptr, 0);  // 100 ms blocker
  for (int i = 0; i < N; i++) {
    spin<<<1, 1, 0, s>>>((unsigned long long)(SPIN_US * 1e3), dends, i);
    ret[i] = now_us();
  }
  CK(cudaStreamSynchronize(s));
  // Blocked launches: those that returned after the first spin kernel ended.
  double first_end = ends[0] / 1e3 + off;
  int first_blocked = -1;
  for (int i = 0; i < N; i++)
    if (ret[i] > first_end) {
      first_blocked = i;
      break;
    }
  std::printf("spin kernels of %.0f us: first launch returning after kernel 0 ended: #%d\n", SPIN_US,
              first_blocked);
  if (first_blocked > 0) {
    // For which j does "call i returns when kernel i - j ends" fit best (steady state)?
    int best_j = -1;
    double best = 1e300, best_med = 0;
    for (int j = std::max(1, first_blocked - 64); j <= first_blocked + 64; j++) {
      std::vector<double> lag;
      for (int i = first_blocked + 200; i < N; i++) lag.push_back(ret[i] - (ends[i - j] / 1e3 + off));
      std::sort(lag.begin(), lag.end());
      double med = lag[lag.size() / 2];
      double spread = lag[lag.size() * 9 / 10] - lag[lag.size() / 10];
      if (med >= -2.0 && med < best) {
        best = med;
        best_j = j;
        best_med = med;
        (void)spread;
      }
    }
    std::vector<double> lag;
    for (int i = first_blocked + 200; i < N; i++) lag.push_back(ret[i] - (ends[i - best_j] / 1e3 + off));
    std::sort(lag.begin(), lag.end());
    std::printf("blocked launch i returns after kernel i-%d ends: lag median %.1f us, p10 %.1f, p90 %.1f "
                "(clock offset error ~ a few us)\n",
                best_j, best_med, lag[lag.size() / 10], lag[lag.size() * 9 / 10]);
    double host_gap = 0;
    int m = 0;
    for (int i = first_blocked + 200; i + 1 < N; i++, m++) host_gap += ret[i + 1] - ret[i];
    std::printf("blocked launches return every %.1f us on average (kernels take %.0f us)\n", host_gap / m,
                SPIN_US);
  }
  return 0;
}
