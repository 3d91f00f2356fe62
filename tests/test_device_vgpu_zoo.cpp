// A zoo of what ordinary CUDA C++ compiles to: the whole float and double libm, half and
// bfloat16 math, __constant__ and __device__ data, struct parameters, float4 loads, cooperative
// groups, 64-bit shuffles, 3-D grids. Results against the host's libm / hand computation.

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/cuda/backends.h"
#include "support/float_bits.h"
#include "support/vgpu_harness.h"

using namespace kiln::test;

namespace {

// clang-format off
#define UNARY_FLOAT_FUNCS(X)                                                                      \
  X(expf, std::exp)                                                                               \
  X(exp2f, std::exp2)                                                                             \
  X(exp10f, [](double v) { return std::pow(10.0, v); })                                           \
  X(expm1f, std::expm1)                                                                           \
  X(logf, std::log)                                                                               \
  X(log2f, std::log2)                                                                             \
  X(log10f, std::log10) X(log1pf, std::log1p) X(sinf, std::sin) X(cosf, std::cos)                 \
      X(tanf, std::tan) X(asinf, std::asin) X(acosf, std::acos) X(atanf, std::atan)               \
          X(sinhf, std::sinh) X(coshf, std::cosh) X(tanhf, std::tanh) X(asinhf, std::asinh)       \
              X(acoshf, std::acosh) X(atanhf, std::atanh) X(sqrtf, std::sqrt) X(cbrtf, std::cbrt) \
                  X(erff, std::erf) X(erfcf, std::erfc) X(lgammaf, std::lgamma)                   \
                      X(tgammaf, std::tgamma) X(floorf, std::floor) X(ceilf, std::ceil)           \
                          X(truncf, std::trunc) X(roundf, std::round) X(rintf, std::nearbyint)    \
                              X(sinpif, [](double v) { return std::sin(M_PI * v); })              \
                                  X(normcdff,                                                     \
                                    [](double v) { return 0.5 * std::erfc(-v / std::sqrt(2.0)); })
// clang-format on

std::string zoo_source() {
  std::string s =
      "extern \"C\" __global__ void zoo(const float* x, float* y, double* yd, int n) {\n"
      "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;\n"
      "  float v = x[i]; double d = v; int k = 0;\n";
#define EMIT(f, ref)                                      \
  s += "  y[i * 64 + k] = " #f "(v); yd[i * 64 + k] = " + \
       std::string(#f).substr(0, std::string(#f).size() - 1) + "(d); ++k;\n";
  UNARY_FLOAT_FUNCS(EMIT)
#undef EMIT
  s += "  y[i * 64 + k] = powf(fabsf(v), 1.7f); yd[i * 64 + k] = pow(fabs(d), 1.7); ++k;\n"
       "  y[i * 64 + k] = fmodf(v, 0.7f); yd[i * 64 + k] = fmod(d, 0.7); ++k;\n"
       "  y[i * 64 + k] = hypotf(v, 1.3f); yd[i * 64 + k] = hypot(d, 1.3); ++k;\n"
       "  y[i * 64 + k] = atan2f(v, -0.4f); yd[i * 64 + k] = atan2(d, -0.4); ++k;\n"
       "  y[i * 64 + k] = ldexpf(v, 5); yd[i * 64 + k] = ldexp(d, -5); ++k;\n"
       "  y[i * 64 + k] = remainderf(v, 0.3f); yd[i * 64 + k] = remainder(d, 0.3); ++k;\n"
       "}\n";
  return s;
}

std::vector<double (*)(double)> zoo_refs() {
  std::vector<double (*)(double)> r;
#define REF(f, ref) r.push_back([](double v) { return static_cast<double>(ref(v)); });
  UNARY_FLOAT_FUNCS(REF)
#undef REF
  r.push_back([](double v) { return std::pow(std::fabs(v), 1.7); });
  return r;
}

double domain_value(int i, int fn) {
  // Inputs inside every function's domain: acosh needs >= 1, atanh/asin/acos |x| < 1.
  double t = -0.95 + 1.9 * (i + 0.5) / 64.0;
  if (fn == 18) return 1.0 + 3.0 * (i + 0.5) / 64.0;  // acoshf
  return t * (fn == 24 || fn == 25 ? 3.0 : 1.0);      // gamma functions: wider
}

}  // namespace

BOOST_AUTO_TEST_SUITE(vgpu_zoo)

BOOST_AUTO_TEST_CASE(float_and_double_libm) {
  Gpu g;
  std::string ptx = compile(zoo_source());
  auto refs = zoo_refs();
  const int n = 64;
  const int nf = static_cast<int>(refs.size());
  for (int fn = 0; fn < nf; ++fn) {
    std::vector<float> x(n);
    for (int i = 0; i < n; ++i) x[i] = static_cast<float>(domain_value(i, fn));
    DevicePtr dx = g.upload(x), dy = g.zeros<float>(64 * n), dyd = g.zeros<double>(64 * n);
    g.run(ptx, "zoo", Dim3{1}, Dim3{64}, 0, dx, dy, dyd, n);
    auto y = g.download<float>(dy, 64 * n);
    auto yd = g.download<double>(dyd, 64 * n);
    for (int i = 0; i < n; ++i) {
      double want = refs[static_cast<std::size_t>(fn)](static_cast<double>(x[i]));
      double got = y[64 * i + fn], gotd = yd[64 * i + fn];
      double tol = 4 * std::fabs(want) * 1.2e-7 + 1e-6;  // CUDA documents <= 4 ulp here
      if (fn == 24 || fn == 25) tol *= 4;                // lgammaf / tgammaf: 6 and 11 ulp
      BOOST_REQUIRE_MESSAGE(
          std::fabs(got - want) <= tol || (std::isnan(got) && std::isnan(want)),
          "float fn " << fn << " x=" << x[i] << " got " << got << " want " << want);
      BOOST_REQUIRE_MESSAGE(
          std::fabs(gotd - want) <= 1e-13 * (1 + std::fabs(want)) ||
              (std::isnan(gotd) && std::isnan(want)),
          "double fn " << fn << " x=" << x[i] << " got " << gotd << " want " << want);
    }
  }
}

BOOST_AUTO_TEST_CASE(constant_and_device_data_structs_vectors_and_3d_grids) {
  Gpu g;
  std::string ptx = compile(R"(
__constant__ float coeff[4] = {1.0f, -2.0f, 0.5f, 4.0f};
__device__ int table[3] = {10, 20, 30};
__device__ unsigned long long counter;
__device__ int flag = 7;
struct Params { int scale; float bias; long long offset; };
extern "C" __global__ void k(const float4* __restrict__ in, float* out, Params p) {
  unsigned bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned t = bx * blockDim.x * blockDim.y * blockDim.z + threadIdx.x +
               blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  float4 v = __ldg(in + t);
  out[t] = (v.x * coeff[0] + v.y * coeff[1] + v.z * coeff[2] + v.w * coeff[3]) * p.scale + p.bias +
           table[t % 3] + (float)p.offset;
  atomicAdd(&counter, 1ull);
  if (t == 0) flag = 11;
}
extern "C" __global__ void read_counter(unsigned long long* o, int* t) { *o = counter; *t = flag; })");
  Dim3 grid{2, 2, 2}, block{4, 2, 2};
  int n = 8 * 16;
  std::vector<float> in(4 * n);
  for (int i = 0; i < 4 * n; ++i) in[i] = 0.25f * static_cast<float>(i % 13);
  DevicePtr din = g.upload(in), dout = g.zeros<float>(n);
  struct Params {
    int scale;
    float bias;
    long long offset;
  } p{3, 0.5f, 1000};
  auto m = g.b->load_module(ptx);
  void* params[] = {&din, &dout, &p};
  g.b->launch(g.b->get_function(m, "k"), grid, block, 0, nullptr, params);
  DevicePtr dc = g.zeros<unsigned long long>(1), dt = g.zeros<int>(1);
  void* params2[] = {&dc, &dt};
  g.b->launch(g.b->get_function(m, "read_counter"), Dim3{1}, Dim3{1}, 0, nullptr, params2);
  g.b->unload_module(m);
  auto out = g.download<float>(dout, n);
  int table[3] = {10, 20, 30};
  for (int t = 0; t < n; ++t) {
    float want =
        (in[4 * t] * 1.0f + in[4 * t + 1] * -2.0f + in[4 * t + 2] * 0.5f + in[4 * t + 3] * 4.0f) *
            3 +
        0.5f + table[t % 3] + 1000.0f;
    BOOST_REQUIRE_CLOSE(out[t], want, 1e-4);
  }
  BOOST_TEST(g.download<unsigned long long>(dc, 1)[0] == static_cast<unsigned long long>(n));
  BOOST_TEST(g.download<int>(dt, 1)[0] == 11);
}

BOOST_AUTO_TEST_CASE(half_bfloat16_math_cooperative_groups_and_64bit_shuffles) {
  Gpu g;
  std::string ptx = compile(R"(
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void k(const float* x, float* out, double* dout) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  int t = threadIdx.x;
  float v = x[t];
  __half h = __float2half(v);
  __nv_bfloat16 b = __float2bfloat16(v);
  float* o = out + 16 * t;
  o[0] = __half2float(hsqrt(__habs(h)));
  o[1] = __half2float(hexp(h));
  o[2] = __half2float(__hmax(h, __float2half(0.25f)));
  o[3] = __hlt(h, __float2half(0.0f)) ? 1.0f : 0.0f;
  o[4] = __bfloat162float(__hmul(b, b));
  o[5] = __bfloat162float(hsqrt(__habs(b)));
  __half2 h2 = __floats2half2_rn(v, 2.0f * v);
  float2 f2 = __half22float2(__hadd2(h2, h2));
  o[6] = f2.x; o[7] = f2.y;
  double d = (double)v * 1e10;
  double sum = d;
  for (int s = 16; s > 0; s >>= 1) sum += warp.shfl_xor(sum, s);
  dout[t] = sum;
  block.sync();
  o[8] = (float)warp.thread_rank();
  o[9] = (float)warp.ballot(v > 0.0f);
  o[10] = warp.any(v > 1.9f) ? 1.0f : 0.0f;
  long long big = ((long long)t << 40) | t;
  o[11] = (float)((warp.shfl(big, 3) >> 40) * 1000 + (warp.shfl(big, 3) & 0xff));
  o[12] = __saturatef(v); o[13] = __fdividef(v, 3.0f); o[14] = __int_as_float(__float_as_int(v) ^ 0x80000000);
  o[15] = fminf(v, 0.0f) + fmaxf(v, 1.0f);
})");
  int n = 64;
  auto x = random_floats(n, 31);
  DevicePtr dx = g.upload(x), dout = g.zeros<float>(16 * n), dd = g.zeros<double>(n);
  g.run(ptx, "k", Dim3{1}, Dim3{64}, 0, dx, dout, dd);
  auto o = g.download<float>(dout, 16 * n);
  auto dsum = g.download<double>(dd, n);
  // Round to half by an encoding written out in the test, not the interpreter's.
  auto rh = [](double v) { return kiln::test::f16_rounded(v); };
  for (int t = 0; t < n; ++t) {
    double v = x[t], hv = rh(v);
    const float* r = &o[16 * t];
    BOOST_REQUIRE_SMALL(r[0] - std::sqrt(std::fabs(hv)), 2e-3 * (1 + std::sqrt(std::fabs(hv))));
    BOOST_REQUIRE_SMALL(r[1] - std::exp(hv), 2e-3 * std::exp(hv));
    BOOST_REQUIRE_EQUAL(r[2], std::max(hv, 0.25));
    BOOST_REQUIRE_EQUAL(r[3], hv < 0 ? 1.0f : 0.0f);
    BOOST_REQUIRE_SMALL(r[4] - v * v, 2e-2 * (v * v) + 1e-6);
    BOOST_REQUIRE_SMALL(r[5] - std::sqrt(std::fabs(v)), 1e-2);
    BOOST_REQUIRE_SMALL(r[6] - 2 * v, 2e-3 * (1 + std::fabs(v)));
    BOOST_REQUIRE_SMALL(r[7] - 4 * v, 4e-3 * (1 + std::fabs(v)));
    double want_sum = 0;
    for (int j = 0; j < 32; ++j) want_sum += static_cast<double>(x[t / 32 * 32 + j]) * 1e10;
    BOOST_REQUIRE_SMALL(dsum[t] - want_sum, 1e-3);
    BOOST_REQUIRE_EQUAL(r[8], static_cast<float>(t % 32));
    std::uint32_t ballot = 0;
    bool any = false;
    for (int j = 0; j < 32; ++j)
      ballot |= std::uint32_t(x[t / 32 * 32 + j] > 0) << j, any |= x[t / 32 * 32 + j] > 1.9f;
    BOOST_REQUIRE_EQUAL(r[9], static_cast<float>(ballot));
    BOOST_REQUIRE_EQUAL(r[10], any ? 1.0f : 0.0f);
    int src = t / 32 * 32 + 3;
    BOOST_REQUIRE_EQUAL(r[11], static_cast<float>(src * 1000 + src));
    BOOST_REQUIRE_EQUAL(r[12], std::clamp(x[t], 0.0f, 1.0f));
    BOOST_REQUIRE_SMALL(r[13] - x[t] / 3.0f, 1e-6f);
    BOOST_REQUIRE_EQUAL(r[14], -x[t]);
    BOOST_REQUIRE_EQUAL(r[15], std::min(x[t], 0.0f) + std::max(x[t], 1.0f));
  }
}

BOOST_AUTO_TEST_CASE(cp_async_dot_products_fns_redux_and_elect) {
  Gpu g;
  std::string ptx = compile(R"(
#include <cuda_pipeline.h>
__constant__ unsigned fns_base[4] = {0, 7, 31, 20};
__constant__ int fns_off[4] = {1, 0, -1, -2};
extern "C" __global__ void misc(const float4* g, const int* a, int* out) {
  __shared__ float4 s[64];
  __pipeline_memcpy_async(&s[threadIdx.x], &g[threadIdx.x], sizeof(float4));
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  int t = threadIdx.x, x = a[t];
  int* o = out + 8 * t;
  o[0] = (int)s[63 - t].x; o[1] = (int)s[63 - t].w;
  o[2] = __dp4a(x, 0x01FF0304, 5);
  o[3] = (int)__dp4a((unsigned)x, 0x01FF0304u, 5u);
  o[4] = __dp2a_lo(x, 0x00F50006, 1);
  o[5] = (int)__reduce_or_sync(0xffffffff, (unsigned)x);
  o[6] = (int)__fns(0xff00ff00u, fns_base[t % 4], fns_off[t % 4]);
  int leader = -1;
  if (t % 32 >= 4) {
    unsigned l;
    asm volatile("{ .reg .pred p; elect.sync %0|p, %1; }" : "=r"(l) : "r"(0xfffffff0u));
    leader = (int)l;
  }
  o[7] = leader;
})");
  int n = 64;
  std::vector<float> gin(4 * n);
  for (int i = 0; i < 4 * n; ++i) gin[i] = static_cast<float>(i);
  std::vector<int> a(n);
  std::uint32_t seed = 17;
  for (int i = 0; i < n; ++i) seed = seed * 1664525u + 1013904223u, a[i] = static_cast<int>(seed);
  DevicePtr dg = g.upload(gin), da = g.upload(a), dout = g.zeros<int>(8 * n);
  g.run(ptx, "misc", Dim3{1}, Dim3{64}, 0, dg, da, dout);
  auto o = g.download<int>(dout, 8 * n);
  std::uint32_t fns_want[4] = {8, 0xffffffffu, 31, 14};
  for (int t = 0; t < n; ++t) {
    std::uint32_t x = static_cast<std::uint32_t>(a[t]), b = 0x01FF0304u;
    std::int64_t s4 = 5, u4 = 5;
    for (int i = 0; i < 4; ++i) {
      s4 += std::int64_t(std::int8_t(x >> (8 * i))) * std::int8_t(b >> (8 * i));
      u4 += std::int64_t(std::uint8_t(x >> (8 * i))) * std::uint8_t(b >> (8 * i));
    }
    std::uint32_t b2 = 0x00F50006u;
    std::int64_t s2 = 1 + std::int64_t(std::int16_t(x)) * std::int8_t(b2) +
                      std::int64_t(std::int16_t(x >> 16)) * std::int8_t(b2 >> 8);
    std::uint32_t orv = 0;
    for (int j = 0; j < 32; ++j) orv |= static_cast<std::uint32_t>(a[t / 32 * 32 + j]);
    int want[8] = {4 * (63 - t),
                   4 * (63 - t) + 3,
                   static_cast<int>(s4),
                   static_cast<int>(u4),
                   static_cast<int>(s2),
                   static_cast<int>(orv),
                   static_cast<int>(fns_want[t % 4]),
                   (t % 32) >= 4 ? 4 : -1};
    for (int k = 0; k < 8; ++k)
      BOOST_REQUIRE_MESSAGE(o[8 * t + k] == want[k], "op " << k << " thread " << t << " got "
                                                           << o[8 * t + k] << " want " << want[k]);
  }
}

BOOST_AUTO_TEST_SUITE_END()
