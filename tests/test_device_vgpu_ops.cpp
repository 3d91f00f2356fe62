// The virtual GPU on the instruction families NVRTC emits for math and warp code: libm
// (precise and --use_fast_math), integer intrinsics, conversions with every rounding mode,
// shuffles in all modes, votes, match, activemask, block-wide votes, atomics on global and
// shared memory, printf. Expected values come from the host (libm, hand computation).

#include <unistd.h>
#include <bit>
#include <boost/test/unit_test.hpp>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/cuda/backends.h"
#include "runtime/cuda/virtual/float_format.h"
#include "support/capture_output.h"
#include "support/vgpu_harness.h"

using namespace kiln::test;

namespace {

// ulp distance between two floats (same sign assumed near the values tested).
std::int64_t ulps(float a, float b) {
  if (a == b) return 0;
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : 1 << 30;
  auto ia = static_cast<std::int64_t>(std::bit_cast<std::int32_t>(a));
  auto ib = static_cast<std::int64_t>(std::bit_cast<std::int32_t>(b));
  if (ia < 0) ia = std::numeric_limits<std::int32_t>::min() - ia;
  if (ib < 0) ib = std::numeric_limits<std::int32_t>::min() - ib;
  return std::llabs(ia - ib);
}

const char* kMathSrc = R"(
extern "C" __global__ void math(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  float* o = y + 12 * i;
  o[0] = expf(v); o[1] = logf(fabsf(v) + 0.5f); o[2] = sinf(v); o[3] = cosf(v);
  o[4] = tanhf(v); o[5] = powf(fabsf(v), 2.5f); o[6] = sqrtf(fabsf(v)); o[7] = rsqrtf(fabsf(v) + 1.f);
  o[8] = erff(v); o[9] = v / (v + 3.0f); o[10] = atan2f(v, 0.7f); o[11] = exp2f(v) + log2f(fabsf(v) + 1.f);
}
extern "C" __global__ void dmath(const double* x, double* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double v = x[i];
  double* o = y + 6 * i;
  o[0] = exp(v); o[1] = log(fabs(v) + 0.5); o[2] = sin(v); o[3] = tanh(v); o[4] = v / (v + 3.0);
  o[5] = pow(fabs(v), 1.5);
})";

std::vector<double> host_math(float v) {
  double d = v;
  return {std::exp(d),
          std::log(std::fabs(d) + 0.5),
          std::sin(d),
          std::cos(d),
          std::tanh(d),
          std::pow(std::fabs(d), 2.5),
          std::sqrt(std::fabs(d)),
          1 / std::sqrt(std::fabs(d) + 1),
          std::erf(d),
          d / (d + 3.0),
          std::atan2(d, 0.7),
          std::exp2(d) + std::log2(std::fabs(d) + 1)};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(vgpu_ops)

BOOST_AUTO_TEST_CASE(libm_float_precise_within_cuda_ulp_bounds) {
  Gpu g;
  std::string ptx = compile(kMathSrc);
  int n = 300;
  auto x = random_floats(n, 11);
  x[0] = 0.0f, x[1] = -0.0f, x[2] = 1.0f, x[3] = 40.0f, x[4] = -40.0f;  // edge-ish values
  DevicePtr dx = g.upload(x), dy = g.zeros<float>(12 * n);
  g.run(ptx, "math", Dim3{static_cast<unsigned>((n + 127) / 128)}, Dim3{128}, 0, dx, dy, n);
  auto y = g.download<float>(dy, 12 * n);
  // CUDA's documented maximum ulp errors are at most 4 for these (powf 4, erff 2, expf 2...).
  for (int i = 0; i < n; ++i) {
    auto want = host_math(x[i]);
    for (int k = 0; k < 12; ++k) {
      float w = static_cast<float>(want[k]);
      bool ok = ulps(y[12 * i + k], w) <= 4 || std::fabs(y[12 * i + k] - w) < 1e-6f;
      BOOST_REQUIRE_MESSAGE(
          ok, "fn " << k << " x=" << x[i] << " got " << y[12 * i + k] << " want " << w);
    }
  }
}

BOOST_AUTO_TEST_CASE(libm_float_fast_math_within_intrinsic_bounds) {
  Gpu g;
  std::string ptx = compile(kMathSrc, {"--use_fast_math"});
  BOOST_TEST(ptx.find("ex2.approx.ftz.f32") != std::string::npos);
  int n = 200;
  auto x = random_floats(n, 12);
  DevicePtr dx = g.upload(x), dy = g.zeros<float>(12 * n);
  g.run(ptx, "math", Dim3{2}, Dim3{128}, 0, dx, dy, n);
  auto y = g.download<float>(dy, 12 * n);
  for (int i = 0; i < n; ++i) {
    auto want = host_math(x[i]);
    for (int k = 0; k < 12; ++k) {
      if (k == 8) continue;  // erff is not an intrinsic
      double w = want[k], got = y[12 * i + k];
      BOOST_REQUIRE_MESSAGE(std::fabs(got - w) <= 1e-5 + 2e-6 * std::fabs(w) * 8,
                            "fn " << k << " x=" << x[i] << " got " << got << " want " << w);
    }
  }
}

BOOST_AUTO_TEST_CASE(libm_double) {
  Gpu g;
  std::string ptx = compile(kMathSrc);
  int n = 100;
  std::vector<double> x(n);
  for (int i = 0; i < n; ++i) x[i] = -3.0 + 0.061 * i;
  DevicePtr dx = g.upload(x), dy = g.zeros<double>(6 * n);
  g.run(ptx, "dmath", Dim3{1}, Dim3{128}, 0, dx, dy, n);
  auto y = g.download<double>(dy, 6 * n);
  for (int i = 0; i < n; ++i) {
    double v = x[i];
    double want[] = {std::exp(v),   std::log(std::fabs(v) + 0.5), std::sin(v), std::tanh(v),
                     v / (v + 3.0), std::pow(std::fabs(v), 1.5)};
    for (int k = 0; k < 6; ++k)
      BOOST_REQUIRE_MESSAGE(y[6 * i + k] == want[k] || std::fabs(y[6 * i + k] - want[k]) <=
                                                           1e-15 * (1 + std::fabs(want[k])),
                            "fn " << k << " x=" << v);
    BOOST_REQUIRE_EQUAL(y[6 * i + 4], v / (v + 3.0));  // div.rn.f64 is exact IEEE
  }
}

BOOST_AUTO_TEST_CASE(integer_intrinsics) {
  Gpu g;
  std::string ptx = compile(R"(
extern "C" __global__ void ints(const unsigned* a, const unsigned* b, unsigned long long* o) {
  int i = threadIdx.x;
  unsigned x = a[i], y = b[i];
  unsigned long long* r = o + 16 * i;
  r[0] = __popc(x); r[1] = __clz(x); r[2] = __brev(x); r[3] = __ffs(x);
  r[4] = __byte_perm(x, y, 0x5140); r[5] = __funnelshift_l(x, y, y & 31);
  r[6] = __funnelshift_r(x, y, y & 31); r[7] = __umulhi(x, y); r[8] = __mulhi((int)x, (int)y);
  r[9] = __umul64hi((unsigned long long)x << 20 | y, (unsigned long long)y << 30 | x);
  r[10] = (unsigned)((int)x >> (y & 31)); r[11] = __sad(x, y, 7u);
  r[12] = __popcll((unsigned long long)x << 32 | y); r[13] = __clzll((unsigned long long)y);
  r[14] = (long long)(int)x * (long long)(int)y; r[15] = __usad(x, y, 1u) ^ __rhadd((int)x, (int)y);
})");
  int n = 64;
  std::vector<unsigned> a(n), b(n);
  std::uint32_t s = 99;
  for (int i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    a[i] = s;
    s = s * 1664525u + 1013904223u;
    b[i] = s;
  }
  a[0] = 0, b[0] = 0, a[1] = 0xffffffffu, b[1] = 1;
  DevicePtr da = g.upload(a), db = g.upload(b), dout = g.zeros<std::uint64_t>(16 * n);
  g.run(ptx, "ints", Dim3{1}, Dim3{64}, 0, da, db, dout);
  auto r = g.download<std::uint64_t>(dout, 16 * n);
  for (int i = 0; i < n; ++i) {
    std::uint32_t x = a[i], y = b[i];
    std::uint32_t brev = 0;
    for (int k = 0; k < 32; ++k)
      if (x >> k & 1) brev |= 1u << (31 - k);
    std::uint64_t tmp = (std::uint64_t(y) << 32) | x;
    std::uint32_t perm = 0;
    for (int k = 0; k < 4; ++k)
      perm |= std::uint32_t((tmp >> (8 * ((0x5140 >> (4 * k)) & 7))) & 0xff) << (8 * k);
    unsigned sh = y & 31;
    std::uint64_t fs = (std::uint64_t(y) << 32) | x;
    unsigned __int128 p = (unsigned __int128)((std::uint64_t(x) << 20) | y) *
                          (unsigned __int128)((std::uint64_t(y) << 30) | x);
    std::uint64_t want[] = {
        std::uint64_t(std::popcount(x)),
        std::uint64_t(std::countl_zero(x)),
        brev,
        std::uint64_t(x ? std::countr_zero(x) + 1 : 0),
        perm,
        std::uint32_t((fs << sh) >> 32),
        std::uint32_t(fs >> sh),
        std::uint32_t((std::uint64_t(x) * y) >> 32),
        std::uint64_t(std::int64_t(
            std::int32_t(std::uint64_t(std::int64_t(std::int32_t(x)) * std::int32_t(y)) >> 32))),
        std::uint64_t(p >> 64),
        std::uint32_t(std::int32_t(x) >> sh),
        std::uint64_t(std::uint32_t(std::llabs(std::int64_t(std::int32_t(x)) - std::int32_t(y))) +
                      7u),
        std::uint64_t(std::popcount((std::uint64_t(x) << 32) | y)),
        std::uint64_t(std::countl_zero(std::uint64_t(y))),
        std::uint64_t(std::int64_t(std::int32_t(x)) * std::int32_t(y)),
        std::uint32_t(((x > y ? x - y : y - x) + 1u) ^
                      std::uint32_t((std::int64_t(std::int32_t(x)) + std::int32_t(y) + 1) >> 1))};
    for (int k = 0; k < 16; ++k)
      BOOST_REQUIRE_MESSAGE(r[16 * i + k] == want[k], "op " << k << " x=" << x << " y=" << y
                                                            << " got " << r[16 * i + k] << " want "
                                                            << want[k]);
  }
}

BOOST_AUTO_TEST_CASE(warp_shuffles_votes_match_and_block_votes) {
  Gpu g;
  std::string ptx = compile(R"(
extern "C" __global__ void warp(const int* a, int* o) {
  int t = threadIdx.x, l = t & 31, v = a[t];
  int* r = o + 16 * t;
  r[0] = __shfl_sync(0xffffffff, v, (l * 7) & 31);
  r[1] = __shfl_up_sync(0xffffffff, v, 3);
  r[2] = __shfl_down_sync(0xffffffff, v, 5);
  r[3] = __shfl_xor_sync(0xffffffff, v, 6);
  r[4] = __shfl_sync(0xffffffff, v, 3, 8);
  r[5] = __shfl_up_sync(0xffffffff, v, 2, 16);
  r[6] = __shfl_down_sync(0xffffffff, v, 3, 4);
  r[7] = __shfl_xor_sync(0xffffffff, v, 9, 16);
  r[8] = __ballot_sync(0xffffffff, v & 1);
  r[9] = __all_sync(0xffffffff, v > -1000) + 2 * __all_sync(0xffffffff, v > 0);
  r[10] = __any_sync(0xffffffff, v == 5) + 2 * __uni_sync(0xffffffff, v > 1000000);
  r[11] = __match_any_sync(0xffffffff, v & 3);
  r[12] = __activemask();
  r[13] = __reduce_add_sync(0xffffffff, v) ^ __reduce_max_sync(0xffffffff, (unsigned)v);
  if (l < 16) r[14] = __shfl_down_sync(0x0000ffff, v, 1);
  else r[14] = -1;
  r[15] = __syncthreads_count(v & 1) + 1000 * __syncthreads_or(v == 7) + 100000 * __syncthreads_and(v >= 0);
}
extern "C" __global__ void partial(int* o) { o[threadIdx.x] = __activemask(); })");
  int n = 64;
  std::vector<int> a(n);
  std::uint32_t s = 5;
  for (int i = 0; i < n; ++i) s = s * 1664525u + 1013904223u, a[i] = static_cast<int>(s >> 20);
  a[3] = 5;
  a[40] = 7;
  DevicePtr da = g.upload(a), dout = g.zeros<int>(16 * n);
  g.run(ptx, "warp", Dim3{1}, Dim3{static_cast<unsigned>(n)}, 0, da, dout);
  auto r = g.download<int>(dout, 16 * n);
  int block_count = 0;
  bool block_or = false, block_and = true;
  for (int x : a) block_count += x & 1, block_or |= x == 7, block_and &= x >= 0;
  for (int t = 0; t < n; ++t) {
    int w = t / 32 * 32, l = t % 32;
    auto lane = [&](int src) { return a[w + src]; };
    auto seg = [&](int width) { return l / width * width; };
    std::uint32_t ballot = 0, match = 0;
    bool all1 = true, all2 = true, any = false;
    unsigned sum = 0, mx = 0;
    for (int j = 0; j < 32; ++j) {
      ballot |= std::uint32_t(lane(j) & 1) << j;
      all1 &= lane(j) > -1000, all2 &= lane(j) > 0, any |= lane(j) == 5;
      if ((lane(j) & 3) == (a[t] & 3)) match |= 1u << j;
      sum += static_cast<unsigned>(lane(j)), mx = std::max(mx, static_cast<unsigned>(lane(j)));
    }
    int want[16] = {lane((l * 7) & 31),
                    l >= 3 ? lane(l - 3) : a[t],
                    l + 5 < 32 ? lane(l + 5) : a[t],
                    lane(l ^ 6),
                    lane(seg(8) + 3),
                    l - 2 >= seg(16) ? lane(l - 2) : a[t],
                    l + 3 < seg(4) + 4 ? lane(l + 3) : a[t],
                    (l ^ 9) < seg(16) + 16 ? lane(l ^ 9) : a[t],
                    static_cast<int>(ballot),
                    int(all1) + 2 * int(all2),
                    int(any) + 2,
                    static_cast<int>(match),
                    -1,
                    static_cast<int>(sum ^ mx),
                    l < 16 ? (l + 1 < 16 ? lane(l + 1) : a[t]) : -1,
                    block_count + 1000 * block_or + 100000 * block_and};
    for (int k = 0; k < 16; ++k)
      BOOST_REQUIRE_MESSAGE(r[16 * t + k] == want[k], "op " << k << " thread " << t << " got "
                                                            << r[16 * t + k] << " want "
                                                            << want[k]);
  }
  DevicePtr dp = g.zeros<int>(48);
  g.run(ptx, "partial", Dim3{1}, Dim3{48}, 0, dp);
  auto p = g.download<int>(dp, 48);
  for (int t = 0; t < 48; ++t) BOOST_REQUIRE_EQUAL(p[t], t < 32 ? -1 : 0xffff);
}

BOOST_AUTO_TEST_CASE(atomics_on_global_and_shared_memory) {
  Gpu g;
  std::string ptx = compile(R"(
extern "C" __global__ void atom(int* gi, unsigned* gu, unsigned long long* gl, float* gf,
                                double* gd, int* out) {
  __shared__ int si[3];
  __shared__ float sf;
  __shared__ unsigned su;
  int t = threadIdx.x + blockIdx.x * blockDim.x;
  if (threadIdx.x == 0) { si[0] = 0; si[1] = 0; si[2] = 0; sf = 0; su = 0; }
  __syncthreads();
  atomicAdd(gi + 0, t); atomicSub(gi + 1, t); atomicMin(gi + 2, t - 50); atomicMax(gi + 3, t * 3);
  atomicAnd(gi + 4, ~(1 << (t % 31))); atomicOr(gi + 5, 1 << (t % 29)); atomicXor(gi + 6, t);
  int old = gi[7], assumed;
  do { assumed = old; old = atomicCAS(gi + 7, assumed, assumed + 2); } while (old != assumed);
  if (t == 77) atomicExch(gi + 8, 42);
  atomicInc(gu + 0, 9u); atomicDec(gu + 1, 7u);
  atomicAdd(gl + 0, (unsigned long long)t * 1000000000ull);
  atomicMax(gl + 1, (unsigned long long)t << 40);
  atomicMin((long long*)gl + 2, -(long long)t);
  atomicAdd(gf, 0.5f); atomicAdd(gd, 0.25);
  atomicAdd(si + 0, 1); atomicMax(si + 1, t); atomicMin(si + 2, -t); atomicAdd(&sf, 1.0f);
  atomicInc(&su, 1000u);
  __syncthreads();
  if (threadIdx.x == 0) {
    int* o = out + 5 * blockIdx.x;
    o[0] = si[0]; o[1] = si[1]; o[2] = si[2]; o[3] = (int)sf; o[4] = (int)su;
  }
})");
  const int blocks = 2, threads = 96, n = blocks * threads;
  std::vector<int> gi = {0, 0, 1000, 0, -1, 0, 0, 1, 0};
  std::vector<unsigned> gu = {0, 3};
  std::vector<unsigned long long> gl = {0, 0, 0};
  DevicePtr dgi = g.upload(gi), dgu = g.upload(gu), dgl = g.upload(gl), dgf = g.zeros<float>(1),
            dgd = g.zeros<double>(1), dout = g.zeros<int>(5 * blocks);
  g.run(ptx, "atom", Dim3{blocks}, Dim3{threads}, 0, dgi, dgu, dgl, dgf, dgd, dout);
  auto ri = g.download<int>(dgi, 9);
  auto ru = g.download<unsigned>(dgu, 2);
  auto rl = g.download<unsigned long long>(dgl, 3);
  int sum = 0, andv = -1, orv = 0, xorv = 0;
  unsigned long long lsum = 0;
  for (int t = 0; t < n; ++t)
    sum += t, andv &= ~(1 << (t % 31)), orv |= 1 << (t % 29), xorv ^= t,
        lsum += static_cast<unsigned long long>(t) * 1000000000ull;
  BOOST_TEST(ri[0] == sum);
  BOOST_TEST(ri[1] == -sum);
  BOOST_TEST(ri[2] == -50);
  BOOST_TEST(ri[3] == (n - 1) * 3);
  BOOST_TEST(ri[4] == andv);
  BOOST_TEST(ri[5] == orv);
  BOOST_TEST(ri[6] == xorv);
  BOOST_TEST(ri[7] == 1 + 2 * n);
  BOOST_TEST(ri[8] == 42);
  BOOST_TEST(ru[0] == static_cast<unsigned>(n % 10));
  BOOST_TEST(ru[1] == static_cast<unsigned>(((3 - n) % 8 + 8) % 8));
  BOOST_TEST(rl[0] == lsum);
  BOOST_TEST(rl[1] == static_cast<unsigned long long>(n - 1) << 40);
  BOOST_TEST(static_cast<long long>(rl[2]) == -(n - 1));
  BOOST_TEST(g.download<float>(dgf, 1)[0] == 0.5f * n);
  BOOST_TEST(g.download<double>(dgd, 1)[0] == 0.25 * n);
  auto out = g.download<int>(dout, 5 * blocks);
  for (int b = 0; b < blocks; ++b) {
    BOOST_TEST(out[5 * b + 0] == threads);
    BOOST_TEST(out[5 * b + 1] == (b + 1) * threads - 1);
    BOOST_TEST(out[5 * b + 2] == -((b + 1) * threads - 1));
    BOOST_TEST(out[5 * b + 3] == threads);
    BOOST_TEST(out[5 * b + 4] == threads);
  }
}

BOOST_AUTO_TEST_CASE(printf_and_divergent_loops) {
  Gpu g;
  std::string ptx = compile(R"(
extern "C" __global__ void k(int* o) {
  int t = threadIdx.x, acc = 0;
  for (int i = 0; i < t; ++i) { if (i % 3 == 0) continue; acc += i * (t & 1 ? 1 : -1); }
  o[t] = acc;
  if (t == 5) printf("t=%d acc=%d x=%.2f s=%s u=%llu\n", t, acc, 1.25, "ok", 123456789012ull);
})");
  DevicePtr d = g.zeros<int>(40);
  std::string printed =
      kiln::test::capture_output(1, [&] { g.run(ptx, "k", Dim3{1}, Dim3{40}, 0, d); });
  auto o = g.download<int>(d, 40);
  for (int t = 0; t < 40; ++t) {
    int acc = 0;
    for (int i = 0; i < t; ++i)
      if (i % 3) acc += i * (t & 1 ? 1 : -1);
    BOOST_REQUIRE_EQUAL(o[t], acc);
  }
  BOOST_TEST(printed == "t=5 acc=" + std::to_string(o[5]) + " x=1.25 s=ok u=123456789012\n");
}

BOOST_AUTO_TEST_SUITE_END()
