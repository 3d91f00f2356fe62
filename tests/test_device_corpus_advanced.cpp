// Device corpus, advanced family: recursion through a __noinline__ function, cooperative groups,
// cp.async pipelines, f64 rounding-mode intrinsics and conversions, f16/bf16 math, vector
// atomics and cache-hinted loads.
#include <algorithm>
#include <cfenv>

#include "test_device_corpus.h"

namespace corpus {
namespace {

std::vector<KernelCase> cases() {
  std::vector<KernelCase> v;

  v.push_back({"recursion", R"(
// Real recursion: a call stack in local memory, different depths per thread.
__device__ __noinline__ int ackermann_like(int depth, int x) {
  if (depth == 0) return x + 1;
  return ackermann_like(depth - 1, x * 2 + depth) + (x & 1);
}
extern "C" __global__ void recursion(const int* depth, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = ackermann_like(depth[i], i);
})",
               [](Runner& r) {
                 const int n = 100;
                 auto depth = uniform<int>(n, 0, 12, 70);
                 auto dd = r.input(depth);
                 auto out = r.output<int>(n);
                 r.launch({1}, {128}, dd, out, n);
                 std::function<int(int, int)> f = [&](int d, int x) {
                   return d == 0 ? x + 1 : f(d - 1, x * 2 + d) + (x & 1);
                 };
                 std::vector<int> want(n);
                 for (int i = 0; i < n; ++i) want[i] = f(depth[i], i);
                 r.expect_eq(r.read(out), want, "recursive results");
               }});

  v.push_back({"cg_tile_reduce", R"(
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
extern "C" __global__ void cg_tile_reduce(const int* x, int* tile_sums, int* block_max) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<16> tile = cg::tiled_partition<16>(block);
  int v = x[block.group_index().x * block.size() + block.thread_rank()];
  int s = cg::reduce(tile, v, cg::plus<int>());
  if (tile.thread_rank() == 0) tile_sums[(block.group_index().x * block.size() + block.thread_rank()) / 16] = s;
  __shared__ int m;
  if (block.thread_rank() == 0) m = -2147483647 - 1;
  block.sync();
  atomicMax(&m, cg::reduce(tile, v, cg::greater<int>()));
  block.sync();
  if (block.thread_rank() == 0) block_max[block.group_index().x] = m;
})",
               [](Runner& r) {
                 const int blocks = 3, threads = 96, n = blocks * threads;
                 auto x = uniform<int>(n, -5000, 5000, 71);
                 auto dx = r.input(x);
                 auto sums = r.output<int>(n / 16);
                 auto maxima = r.output<int>(blocks);
                 r.launch({blocks}, {threads}, dx, sums, maxima);
                 std::vector<int> ws(n / 16, 0), wm(blocks, INT32_MIN);
                 for (int i = 0; i < n; ++i)
                   ws[i / 16] += x[i], wm[i / threads] = std::max(wm[i / threads], x[i]);
                 r.expect_eq(r.read(sums), ws, "tile sums");
                 r.expect_eq(r.read(maxima), wm, "block maxima");
               }});

  v.push_back({"cp_async_pipeline", R"(
#include <cuda_pipeline.h>
// Double-buffered global -> shared copies with cp.async, as tiled kernels stage their inputs.
extern "C" __global__ void cp_async_pipeline(const float4* x, float* out, int tiles) {
  __shared__ float4 buf[2][64];
  int t = threadIdx.x;
  float acc = 0.0f;
  __pipeline_memcpy_async(&buf[0][t], &x[t], sizeof(float4));
  __pipeline_commit();
  for (int k = 0; k < tiles; ++k) {
    if (k + 1 < tiles) __pipeline_memcpy_async(&buf[(k + 1) & 1][t], &x[(k + 1) * 64 + t], sizeof(float4));
    __pipeline_commit();
    __pipeline_wait_prior(1);
    __syncthreads();
    float4 a = buf[k & 1][63 - t];
    acc += a.x + a.y + a.z + a.w;
    __syncthreads();
  }
  out[t] = acc;
})",
               [](Runner& r) {
                 const int tiles = 5;
                 auto xi = uniform<int>(tiles * 64 * 4, -100, 100, 72);  // integers: exact sums
                 std::vector<float> x(xi.begin(), xi.end());
                 auto dx = r.input(x);
                 auto out = r.output<float>(64);
                 r.launch({1}, {64}, dx, out, tiles);
                 std::vector<float> want(64, 0.0f);
                 for (int t = 0; t < 64; ++t)
                   for (int k = 0; k < tiles; ++k)
                     for (int c = 0; c < 4; ++c) want[t] += x[(k * 64 + 63 - t) * 4 + c];
                 r.expect_eq(r.read(out), want, "sums of staged tiles");
               }});

  v.push_back({"f64_rounding_conversions", R"(
extern "C" __global__ void f64_rounding_conversions(const double* x, const double* y, double* d,
                                                    long long* l, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double a = x[i], b = y[i];
  d[5 * i + 0] = __dadd_rd(a, b);
  d[5 * i + 1] = __dmul_ru(a, b);
  d[5 * i + 2] = __ddiv_rz(a, b);
  d[5 * i + 3] = __fma_rn(a, b, -1.0);
  d[5 * i + 4] = __ll2double_rn((long long)(a * 1e9)) + (double)__double2float_rn(b);
  l[2 * i + 0] = __double2ll_rd(a * 1000.0);
  l[2 * i + 1] = (long long)__double2uint_ru(fabs(b));
})",
               [](Runner& r) {
                 const int n = 400;
                 auto x = uniform<double>(n, -1e3, 1e3, 73), y = uniform<double>(n, 0.01, 100, 74);
                 for (int i = 0; i < n; i += 2) y[i] = -y[i];
                 auto dx = r.input(x), dy = r.input(y);
                 auto d = r.output<double>(5 * n);
                 auto l = r.output<long long>(2 * n);
                 r.launch({(n + 127) / 128}, {128}, dx, dy, d, l, n);
                 std::vector<double> wd(5 * n);
                 std::vector<long long> wl(2 * n);
                 auto rounded = [](int mode, auto fn) {
                   int old = std::fegetround();
                   std::fesetround(mode);
                   volatile double res = fn();
                   std::fesetround(old);
                   return static_cast<double>(res);
                 };
                 for (int i = 0; i < n; ++i) {
                   volatile double a = x[i], b = y[i];
                   wd[5 * i + 0] = rounded(FE_DOWNWARD, [&] { return a + b; });
                   wd[5 * i + 1] = rounded(FE_UPWARD, [&] { return a * b; });
                   wd[5 * i + 2] = rounded(FE_TOWARDZERO, [&] { return a / b; });
                   wd[5 * i + 3] = std::fma(x[i], y[i], -1.0);
                   wd[5 * i + 4] = static_cast<double>(static_cast<long long>(x[i] * 1e9)) +
                                   static_cast<double>(static_cast<float>(y[i]));
                   wl[2 * i + 0] = static_cast<long long>(std::floor(x[i] * 1000.0));
                   wl[2 * i + 1] = static_cast<long long>(std::ceil(std::fabs(y[i])));
                 }
                 r.expect_eq(r.read(d), wd, "add.rm, mul.rp, div.rz, fma.rn, cvt f64");
                 r.expect_eq(r.read(l), wl, "cvt.rmi.s64.f64, cvt.rpi.u32.f64");
               }});

  v.push_back(
      {"half_bf16_math", R"(
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void half_bf16_math(const __half* h, const __nv_bfloat16* b, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[5 * i + 0] = __half2float(hexp(h[i]));
  out[5 * i + 1] = __half2float(hsqrt(__habs(h[i])));
  out[5 * i + 2] = __half2float(__hfma(h[i], h[i], __float2half(-1.0f)));
  out[5 * i + 3] = __bfloat162float(__hfma(b[i], b[i], __float2bfloat16(0.25f)));
  out[5 * i + 4] = (__hlt(h[i], __float2half(0.0f)) ? 1.0f : 0.0f) + (__hge(b[i], __float2bfloat16(1.0f)) ? 2.0f : 0.0f);
})",
       [](Runner& r) {
         const int n = 512;
         auto hf = uniform<float>(n, -4, 4, 75), bf = uniform<float>(n, -4, 4, 76);
         std::vector<std::uint16_t> h(n), b(n);
         for (int i = 0; i < n; ++i) h[i] = float_to_half(hf[i]), b[i] = float_to_bf16(bf[i]);
         auto dh = r.input(h), db = r.input(b);
         auto out = r.output<float>(5 * n);
         r.launch({(n + 127) / 128}, {128}, dh, db, out, n);
         auto got = r.read(out);
         std::vector<float> exp_got(n), exp_want(n), rest_got, rest_want;
         for (int i = 0; i < n; ++i) {
           double hv = half_to_float(h[i]), bv = bf16_to_float(b[i]);
           exp_got[i] = got[5 * i], exp_want[i] = static_cast<float>(std::exp(hv));
           // sqrt and fma are correctly rounded to the 16-bit type (fma exact in double).
           rest_got.insert(rest_got.end(),
                           {got[5 * i + 1], got[5 * i + 2], got[5 * i + 3], got[5 * i + 4]});
           rest_want.push_back(
               half_to_float(float_to_half(static_cast<float>(std::sqrt(std::fabs(hv))))));
           rest_want.push_back(half_to_float(float_to_half(static_cast<float>(hv * hv - 1.0))));
           rest_want.push_back(bf16_to_float(float_to_bf16(static_cast<float>(bv * bv + 0.25))));
           rest_want.push_back((hv < 0 ? 1.0f : 0.0f) + (bv >= 1.0 ? 2.0f : 0.0f));
         }
         // hexp is accurate to about 1 f16 ulp (2^-10 relative).
         r.expect_close(exp_got, exp_want, 0, 2e-3, "hexp");
         r.expect_eq(rest_got, rest_want, "hsqrt, __hfma f16/bf16, comparisons");
       }});

  v.push_back({"cache_hint_loads", R"(
extern "C" __global__ void cache_hint_loads(const float* x, const int* idx, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float a = __ldcs(&x[i]);           // streaming
  float b = __ldg(&x[__ldca(&idx[i])]);  // gather through the read-only path
  float c = __ldcg(&x[n - 1 - i]);
  __stcs(&y[i], a + 2.0f * b - c);
})",
               [](Runner& r) {
                 const int n = 777;
                 auto xi = uniform<int>(n, -1000, 1000, 78);
                 std::vector<float> x(xi.begin(), xi.end());
                 auto idx = uniform<int>(n, 0, n - 1, 79);
                 auto dx = r.input(x);
                 auto di = r.input(idx);
                 auto y = r.output<float>(n);
                 r.launch({(n + 127) / 128}, {128}, dx, di, y, n);
                 std::vector<float> want(n);
                 for (int i = 0; i < n; ++i) want[i] = x[i] + 2.0f * x[idx[i]] - x[n - 1 - i];
                 r.expect_eq(r.read(y), want, "y");
               }});

  return v;
}

Register reg("corpus_advanced", cases);

}  // namespace
}  // namespace corpus
