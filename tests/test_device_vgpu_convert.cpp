// Conversions on the virtual GPU with every rounding mode: float -> int (saturating, NaN -> 0),
// float -> f16/bf16 (rn/rz/rd/ru, subnormals, overflow), f64 -> f32, 64-bit int -> float.
// Expected values come from an exhaustive search over all f16 values and from the host FPU.

#include <bit>
#include <boost/test/unit_test.hpp>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/cuda/backends.h"
#include "support/vgpu_harness.h"

using namespace kiln::test;

namespace {

// All half values, decoded independently of the interpreter: (-1)^s * m * 2^e.
double half_value(std::uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0    ? std::ldexp(m, -24)
             : e == 31 ? (m ? NAN : INFINITY)
                       : std::ldexp(1024 + m, e - 25);
  return s ? -v : v;
}

// Correctly rounded float -> half by search: mode 0 nearest-even, 1 toward zero, 2 down, 3 up.
std::uint16_t half_by_search(float f, int mode) {
  double x = f;
  std::uint16_t below = 0xfc00, above = 0x7c00;  // -inf, +inf
  double vb = -INFINITY, va = INFINITY;
  for (unsigned h = 0; h < 0x10000; ++h) {
    double v = half_value(static_cast<std::uint16_t>(h));
    if (std::isnan(v)) continue;
    if (v <= x && (v > vb || (v == vb && v == 0 && std::signbit(x) == bool(h >> 15))))
      vb = v, below = static_cast<std::uint16_t>(h);
    if (v >= x && (v < va || (v == va && v == 0 && std::signbit(x) == bool(h >> 15))))
      va = v, above = static_cast<std::uint16_t>(h);
  }
  if (vb == x) return below;
  double max = 65504.0;
  switch (mode) {
    case 1:
      return x > 0 ? (x > max ? 0x7bff : below) : (x < -max ? 0xfbff : above);
    case 2:
      return x > max ? 0x7bff : below;
    case 3:
      return x < -max ? 0xfbff : above;
  }
  // nearest even; values past max + half an ulp go to infinity
  if (x >= 65520.0) return 0x7c00;
  if (x <= -65520.0) return 0xfc00;
  if (x - vb < va - x) return below;
  if (va - x < x - vb) return above;
  return (below & 1) ? above : below;
}

std::int64_t host_float_to_int(float v, int mode, double lo, double hi) {
  if (std::isnan(v)) return 0;
  double d = v;
  double r = mode == 0   ? std::nearbyint(d)
             : mode == 1 ? std::trunc(d)
             : mode == 2 ? std::floor(d)
                         : std::ceil(d);
  return static_cast<std::int64_t>(std::clamp(r, lo, hi));
}

float host_double_to_float(double d, int fe) {
  std::fesetround(fe);
  volatile double vd = d;
  volatile float f = static_cast<float>(vd);
  std::fesetround(FE_TONEAREST);
  return f;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(vgpu_convert)

BOOST_AUTO_TEST_CASE(conversions_with_every_rounding_mode) {
  Gpu g;
  std::string ptx = compile(R"(
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void conv(const float* x, const double* xd, const long long* xl, int* oi,
                                unsigned short* oh, float* of) {
  int i = threadIdx.x;
  float v = x[i];
  int* r = oi + 8 * i;
  r[0] = __float2int_rn(v); r[1] = __float2int_rz(v); r[2] = __float2int_rd(v);
  r[3] = __float2int_ru(v); r[4] = (int)__float2uint_rn(v); r[5] = (int)(short)__float2int_rz(v);
  r[6] = (int)__float2ll_rd(v * 1e6f); r[7] = __double2int_rn(xd[i]);
  unsigned short* h = oh + 8 * i;
  h[0] = __half_as_ushort(__float2half_rn(v * 9000.f)); h[1] = __half_as_ushort(__float2half_rz(v * 9000.f));
  h[2] = __half_as_ushort(__float2half_rd(v * 1e-3f)); h[3] = __half_as_ushort(__float2half_ru(v * 1e-3f));
  h[4] = __bfloat16_as_ushort(__float2bfloat16_rn(v)); h[5] = __bfloat16_as_ushort(__float2bfloat16_rz(v));
  h[6] = __half_as_ushort(__float2half_rn(v * 1e-6f)); h[7] = __half_as_ushort(__double2half(xd[i]));
  float* f = of + 8 * i;
  f[0] = __double2float_rn(xd[i]); f[1] = __double2float_rz(xd[i]); f[2] = __double2float_rd(xd[i]);
  f[3] = __double2float_ru(xd[i]); f[4] = __ll2float_rn(xl[i]); f[5] = __ll2float_rz(xl[i]);
  f[6] = __ull2float_ru((unsigned long long)xl[i]); f[7] = __int2float_rd((int)xl[i]);
})");
  std::vector<float> x = random_floats(64, 21);
  float specials[] = {0.5f, 1.5f, 2.5f, -2.5f, -0.5f, 3e9f, -3e9f, 7.99999f, 1e-8f, -7.3f};
  for (int k = 0; k < 10; ++k) x[k] = specials[k];
  x[10] = NAN;
  for (int k = 11; k < 64; ++k) x[k] *= static_cast<float>(k);
  std::vector<double> xd(64);
  std::vector<long long> xl(64);
  for (int k = 0; k < 64; ++k) {
    xd[k] = static_cast<double>(x[k]) * (1 + 1e-9 * k) + 1e-12;
    xl[k] = (static_cast<long long>(k) * 0x12345678912345LL) ^ (k * 977);
  }
  xd[10] = 2.5;
  DevicePtr dx = g.upload(x), dxd = g.upload(xd), dxl = g.upload(xl), doi = g.zeros<int>(8 * 64),
            doh = g.zeros<std::uint16_t>(8 * 64), dof = g.zeros<float>(8 * 64);
  g.run(ptx, "conv", Dim3{1}, Dim3{64}, 0, dx, dxd, dxl, doi, doh, dof);
  auto ri = g.download<int>(doi, 8 * 64);
  auto rh = g.download<std::uint16_t>(doh, 8 * 64);
  auto rf = g.download<float>(dof, 8 * 64);
  const double imin = INT32_MIN, imax = INT32_MAX;
  for (int i = 0; i < 64; ++i) {
    float v = x[i];
    std::int64_t wi[] = {
        host_float_to_int(v, 0, imin, imax),
        host_float_to_int(v, 1, imin, imax),
        host_float_to_int(v, 2, imin, imax),
        host_float_to_int(v, 3, imin, imax),
        static_cast<std::int32_t>(
            static_cast<std::uint32_t>(host_float_to_int(v, 0, 0, UINT32_MAX))),
        static_cast<std::int16_t>(host_float_to_int(v, 1, imin, imax)),
        static_cast<std::int32_t>(host_float_to_int(v * 1e6f, 2, -9.2e18, 9.2e18)),
        host_float_to_int(static_cast<float>(0), 0, 0, 0) +
            static_cast<std::int64_t>(std::clamp(std::nearbyint(xd[i]), imin, imax))};
    for (int k = 0; k < 8; ++k)
      BOOST_REQUIRE_MESSAGE(ri[8 * i + k] == wi[k], "int conv " << k << " x=" << v << " got "
                                                                << ri[8 * i + k] << " want "
                                                                << wi[k]);
    if (std::isnan(v)) continue;
    auto bf = [](float f, bool rz) {
      std::uint32_t u = std::bit_cast<std::uint32_t>(f);
      if (rz) return std::uint16_t(u >> 16);
      std::uint32_t lsb = (u >> 16) & 1;
      return std::uint16_t((u + 0x7fff + lsb) >> 16);
    };
    std::uint16_t wh[] = {half_by_search(v * 9000.f, 0),
                          half_by_search(v * 9000.f, 1),
                          half_by_search(v * 1e-3f, 2),
                          half_by_search(v * 1e-3f, 3),
                          bf(v, false),
                          bf(v, true),
                          half_by_search(v * 1e-6f, 0),
                          half_by_search(static_cast<float>(xd[i]), 0)};
    for (int k = 0; k < 8; ++k) {
      if (k == 7 && static_cast<double>(static_cast<float>(xd[i])) != xd[i])
        continue;  // f64 -> f16 directly
      BOOST_REQUIRE_MESSAGE(rh[8 * i + k] == wh[k], "half conv " << k << " x=" << v << " got "
                                                                 << rh[8 * i + k] << " want "
                                                                 << wh[k]);
    }
    float wf[] = {host_double_to_float(xd[i], FE_TONEAREST),
                  host_double_to_float(xd[i], FE_TOWARDZERO),
                  host_double_to_float(xd[i], FE_DOWNWARD),
                  host_double_to_float(xd[i], FE_UPWARD),
                  0,
                  0,
                  0,
                  0};
    long double l = static_cast<long double>(xl[i]);
    std::fesetround(FE_TONEAREST);
    wf[4] = static_cast<float>(xl[i]);
    std::fesetround(FE_TOWARDZERO);
    volatile long long vl = xl[i];
    wf[5] = static_cast<float>(vl);
    std::fesetround(FE_UPWARD);
    volatile unsigned long long vu = static_cast<unsigned long long>(xl[i]);
    wf[6] = static_cast<float>(vu);
    std::fesetround(FE_DOWNWARD);
    volatile int vi = static_cast<int>(xl[i]);
    wf[7] = static_cast<float>(vi);
    std::fesetround(FE_TONEAREST);
    (void)l;
    for (int k = 0; k < 8; ++k)
      BOOST_REQUIRE_MESSAGE(
          std::bit_cast<std::uint32_t>(rf[8 * i + k]) == std::bit_cast<std::uint32_t>(wf[k]),
          "float conv " << k << " i=" << i << " got " << rf[8 * i + k] << " want " << wf[k]);
  }
}

BOOST_AUTO_TEST_SUITE_END()
