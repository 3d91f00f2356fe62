// Device corpus, atomics and multi-kernel family: global and shared atomics (add/min/max/and/or/
// xor/exch/cas, int and float), fetch-and-add compaction, a two-kernel reduction, a tiled matmul.
#include <algorithm>
#include <numeric>

#include "test_device_corpus.h"

namespace corpus {
namespace {

std::vector<KernelCase> cases() {
  std::vector<KernelCase> v;

  v.push_back({"atomics_global_int", R"(
extern "C" __global__ void atomics_global_int(const int* x, int* acc, unsigned* bits,
                                              unsigned long long* acc64, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int v = x[i];
  atomicAdd(&acc[0], v);
  atomicMin(&acc[1], v);
  atomicMax(&acc[2], v);
  atomicSub(&acc[3], 1);
  atomicAnd(&bits[0], ~(1u << (i % 32)) | (unsigned)(v & 1));
  atomicOr(&bits[1], 1u << (v & 31));
  atomicXor(&bits[2], (unsigned)v);
  atomicAdd(&acc64[0], (unsigned long long)(long long)v);
  atomicMax(&acc64[1], (unsigned long long)(v + 2000000));
})",
               [](Runner& r) {
                 const int n = 2000;
                 auto x = uniform<int>(n, -1000000, 1000000, 40);
                 auto dx = r.input(x);
                 auto acc = r.input(std::vector<int>{5, INT32_MAX, INT32_MIN, 0});
                 auto bits = r.input(std::vector<unsigned>{0xffffffffu, 0, 0});
                 auto acc64 = r.input(std::vector<unsigned long long>{0, 0});
                 r.launch({(n + 127) / 128}, {128}, dx, acc, bits, acc64, n);
                 std::vector<int> wa{5, INT32_MAX, INT32_MIN, -n};
                 std::vector<unsigned> wb{0xffffffffu, 0, 0};
                 std::vector<unsigned long long> w64{0, 0};
                 for (int i = 0; i < n; ++i) {
                   wa[0] += x[i], wa[1] = std::min(wa[1], x[i]), wa[2] = std::max(wa[2], x[i]);
                   wb[0] &= ~(1u << (i % 32)) | static_cast<unsigned>(x[i] & 1);
                   wb[1] |= 1u << (x[i] & 31);
                   wb[2] ^= static_cast<unsigned>(x[i]);
                   w64[0] += static_cast<unsigned long long>(static_cast<long long>(x[i]));
                   w64[1] = std::max<unsigned long long>(w64[1], x[i] + 2000000);
                 }
                 r.expect_eq(r.read(acc), wa, "add, min, max, sub");
                 r.expect_eq(r.read(bits), wb, "and, or, xor");
                 r.expect_eq(r.read(acc64), w64, "64-bit add, max");
               }});

  v.push_back({"atomics_global_float", R"(
__device__ float atomic_max_float(float* addr, float value) {
  // CAS loop on the bits: the classic pattern for an atomic the hardware lacks.
  int* p = (int*)addr;
  int old = *p, assumed;
  do {
    assumed = old;
    if (__int_as_float(assumed) >= value) break;
    old = atomicCAS(p, assumed, __float_as_int(value));
  } while (old != assumed);
  return __int_as_float(old);
}
extern "C" __global__ void atomics_global_float(const float* x, float* facc, double* dacc,
                                                float* last, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  atomicAdd(&facc[0], x[i]);
  atomic_max_float(&facc[1], x[i]);
  atomicAdd(&dacc[0], (double)x[i] * 0.5);
  atomicExch(&last[0], x[i]);
})",
               [](Runner& r) {
                 const int n = 1500;
                 // Multiples of 1/4 with small magnitude: every partial sum is exact in any order.
                 auto xi = uniform<int>(n, -4000, 4000, 41);
                 std::vector<float> x(n);
                 for (int i = 0; i < n; ++i) x[i] = xi[i] * 0.25f;
                 auto dx = r.input(x);
                 auto facc = r.input(std::vector<float>{1.0f, -1e30f});
                 auto dacc = r.input(std::vector<double>{0.0});
                 auto last = r.output<float>(1, 12345.0f);
                 r.launch({(n + 255) / 256}, {256}, dx, facc, dacc, last, n);
                 double sum = 1.0, dsum = 0;
                 for (float f : x) sum += f, dsum += f * 0.5;
                 r.expect_eq(r.read(facc),
                             std::vector<float>{static_cast<float>(sum),
                                                *std::max_element(x.begin(), x.end())},
                             "float add, CAS max");
                 r.expect_eq(r.read(dacc), std::vector<double>{dsum}, "double add");
                 float l = r.read(last)[0];
                 BOOST_TEST((std::find(x.begin(), x.end(), l) != x.end()),
                            "atomicExch left " << l << ", not one of the inputs");
               }});

  v.push_back({"atomics_shared_histogram", R"(
extern "C" __global__ void atomics_shared_histogram(const int* x, int* hist, int* extremes,
                                                    float* fsum, int n, int bins) {
  __shared__ int h[64];
  __shared__ int lo, hi;
  __shared__ float s;
  int t = threadIdx.x;
  for (int b = t; b < bins; b += blockDim.x) h[b] = 0;
  if (t == 0) { lo = 2147483647; hi = -2147483647 - 1; s = 0.0f; }
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + t; i < n; i += gridDim.x * blockDim.x) {
    int v = x[i];
    atomicAdd(&h[v % bins], 1);
    atomicMin(&lo, v);
    atomicMax(&hi, v);
    atomicAdd(&s, 0.5f);
    int old = atomicCAS(&h[bins - 1], -1, 0);  // never matches: checks the returned old value
    if (old < 0) atomicExch(&hi, -1);
  }
  __syncthreads();
  for (int b = t; b < bins; b += blockDim.x) atomicAdd(&hist[b], h[b]);
  if (t == 0) {
    atomicMin(&extremes[0], lo);
    atomicMax(&extremes[1], hi);
    atomicAdd(fsum, s);
  }
})",
               [](Runner& r) {
                 const int n = 5000, bins = 37;
                 auto x = uniform<int>(n, 0, 1000000, 42);
                 auto dx = r.input(x);
                 auto hist = r.output<int>(bins);
                 auto ext = r.input(std::vector<int>{INT32_MAX, INT32_MIN});
                 auto fsum = r.output<float>(1);
                 r.launch({4}, {128}, dx, hist, ext, fsum, n, bins);
                 std::vector<int> wh(bins, 0);
                 for (int v : x) ++wh[v % bins];
                 r.expect_eq(r.read(hist), wh, "histogram");
                 r.expect_eq(r.read(ext),
                             std::vector<int>{*std::min_element(x.begin(), x.end()),
                                              *std::max_element(x.begin(), x.end())},
                             "shared min/max");
                 r.expect_eq(r.read(fsum), std::vector<float>{n * 0.5f}, "shared float add");
               }});

  v.push_back({"compact_fetch_add", R"(
extern "C" __global__ void compact_fetch_add(const int* x, int* out, int* count, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && x[i] % 3 == 0) {
    int slot = atomicAdd(count, 1);  // the returned old value is this thread's slot
    out[slot] = x[i];
  }
})",
               [](Runner& r) {
                 const int n = 3000;
                 auto x = uniform<int>(n, 0, 1 << 20, 43);
                 auto dx = r.input(x);
                 auto out = r.output<int>(n, -1);
                 auto count = r.output<int>(1);
                 r.launch({(n + 127) / 128}, {128}, dx, out, count, n);
                 std::vector<int> want;
                 for (int v : x)
                   if (v % 3 == 0) want.push_back(v);
                 int c = r.read(count)[0];
                 BOOST_REQUIRE_EQUAL(c, static_cast<int>(want.size()));
                 auto got = r.read(out);
                 got.resize(c);
                 std::sort(got.begin(), got.end());
                 std::sort(want.begin(), want.end());
                 r.expect_eq(got, want, "compacted values (sorted)");
               }});

  v.push_back({"two_kernel_reduce", R"(
extern "C" __global__ void partial_sums(const double* x, double* partial, int n) {
  __shared__ double s[128];
  int t = threadIdx.x;
  double acc = 0;
  for (int i = blockIdx.x * blockDim.x + t; i < n; i += gridDim.x * blockDim.x) acc += x[i];
  s[t] = acc;
  __syncthreads();
  for (int stride = 64; stride > 0; stride >>= 1) {
    if (t < stride) s[t] += s[t + stride];
    __syncthreads();
  }
  if (t == 0) partial[blockIdx.x] = s[0];
}
extern "C" __global__ void final_sum(const double* partial, double* out, int blocks) {
  double acc = 0;
  for (int b = 0; b < blocks; ++b) acc += partial[b];
  *out = acc;
})",
               [](Runner& r) {
                 const int n = 10000, blocks = 8;
                 auto xi = uniform<int>(n, -1 << 20, 1 << 20, 44);  // integers: exact in any order
                 std::vector<double> x(xi.begin(), xi.end());
                 auto dx = r.input(x);
                 auto partial = r.output<double>(blocks);
                 auto out = r.output<double>(1);
                 r.launch_named("partial_sums", {blocks}, {128}, 0, dx, partial, n);
                 r.launch_named("final_sum", {1}, {1}, 0, partial, out, blocks);
                 r.expect_eq(r.read(out),
                             std::vector<double>{std::accumulate(x.begin(), x.end(), 0.0)}, "sum");
               }});

  v.push_back({"tiled_matmul", R"(
#define TILE 16
extern "C" __global__ void tiled_matmul(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[TILE][TILE], Bs[TILE][TILE + 1];  // +1: no bank conflicts on real GPUs
  int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += TILE) {
    As[threadIdx.y][threadIdx.x] = (row < M && k0 + threadIdx.x < K) ? A[row * K + k0 + threadIdx.x] : 0.0f;
    Bs[threadIdx.y][threadIdx.x] = (col < N && k0 + threadIdx.y < K) ? B[(k0 + threadIdx.y) * N + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = acc;
})",
               [](Runner& r) {
                 const int M = 33, N = 47, K = 29;
                 auto A = uniform<float>(M * K, -1, 1, 45), B = uniform<float>(K * N, -1, 1, 46);
                 auto dA = r.input(A), dB = r.input(B);
                 auto C = r.output<float>(M * N);
                 r.launch({(N + 15) / 16, (M + 15) / 16}, {16, 16}, dA, dB, C, M, N, K);
                 std::vector<float> want(M * N);
                 for (int i = 0; i < M; ++i)
                   for (int j = 0; j < N; ++j) {
                     double s = 0;
                     for (int k = 0; k < K; ++k) s += double{A[i * K + k]} * B[k * N + j];
                     want[i * N + j] = static_cast<float>(s);
                   }
                 r.expect_close(r.read(C), want, 1e-5, 1e-5, "C");
               }});

  v.push_back({"atomics_cas64_inc_dec_half", R"(
#include <cuda_fp16.h>
__device__ double atomic_add_cas(double* addr, double value) {
  unsigned long long* p = (unsigned long long*)addr;
  unsigned long long old = *p, assumed;
  do {
    assumed = old;
    old = atomicCAS(p, assumed, __double_as_longlong(__longlong_as_double(assumed) + value));
  } while (old != assumed);
  return __longlong_as_double(old);
}
extern "C" __global__ void atomics_cas64_inc_dec_half(const int* x, double* dsum, unsigned* wrap,
                                                      __half* hsum, unsigned long long* exch, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  atomic_add_cas(dsum, (double)x[i]);
  atomicInc(&wrap[0], 9u);   // counts modulo 10
  atomicDec(&wrap[1], 6u);   // counts down from 6, wrapping
  atomicAdd(hsum, __int2half_rn(x[i] & 1));
  atomicExch(exch, (unsigned long long)i);
})",
               [](Runner& r) {
                 const int n = 777;
                 auto x = uniform<int>(n, -1000, 1000, 47);
                 auto dx = r.input(x);
                 auto dsum = r.output<double>(1);
                 auto wrap = r.output<unsigned>(2);
                 auto hsum = r.output<std::uint16_t>(1);
                 auto exch = r.output<unsigned long long>(1, ~0ull);
                 r.launch({(n + 127) / 128}, {128}, dx, dsum, wrap, hsum, exch, n);
                 double s = 0;
                 int odd = 0;
                 for (int v : x) s += v, odd += v & 1;
                 unsigned inc = 0, dec = 0;
                 for (int i = 0; i < n; ++i) {
                   inc = inc >= 9u ? 0u : inc + 1;
                   dec = (dec == 0 || dec > 6u) ? 6u : dec - 1;
                 }
                 r.expect_eq(r.read(dsum), std::vector<double>{s}, "CAS-built f64 add");
                 r.expect_eq(r.read(wrap), std::vector<unsigned>{inc, dec}, "atomicInc/atomicDec");
                 // Sums of 0/1 stay exact in f16 below 2048.
                 r.expect_eq(r.read(hsum),
                             std::vector<std::uint16_t>{float_to_half(static_cast<float>(odd))},
                             "f16 atomicAdd");
                 auto e = r.read(exch)[0];
                 BOOST_TEST(e < static_cast<unsigned long long>(n), "64-bit atomicExch left " << e);
               }});

  return v;
}

Register reg("corpus_atomics", cases);

}  // namespace
}  // namespace corpus
