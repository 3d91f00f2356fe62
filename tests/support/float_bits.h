// f16 and bf16 bit patterns written out from the IEEE 754 layouts (sign, exponent, mantissa;
// round to nearest, ties to even; subnormals; overflow to infinity), for tests whose expected
// values must not come from the virtual GPU's own conversions (vgpu::encode_float) or from
// kiln's. Self-contained: the device suites see no kiln header but their layer's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace kiln::test {

namespace float_bits_detail {

// `x` rounded to a binary format of `mantissa` stored bits and `exponent_bits`, as its bits.
inline std::uint16_t encode(double x, int mantissa, int exponent_bits) {
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const std::uint32_t sign = std::signbit(x) ? 1u << (mantissa + exponent_bits) : 0u;
  const std::uint32_t all_ones = ((1u << exponent_bits) - 1) << mantissa;
  if (std::isnan(x)) return static_cast<std::uint16_t>(sign | all_ones | (1u << (mantissa - 1)));
  double a = std::fabs(x);
  if (std::isinf(a)) return static_cast<std::uint16_t>(sign | all_ones);
  // a = q * 2^(e - mantissa) with q rounded to an integer (ties to even: the default rounding
  // mode); below the normals e stays at the smallest normal's exponent, so subnormals share
  // its quantum.
  int e = a == 0 ? 1 - bias : std::max(std::ilogb(a), 1 - bias);
  double q = std::nearbyint(std::ldexp(a, mantissa - e));
  if (q == std::ldexp(1.0, mantissa + 1)) {  // rounded up into the next binade
    q /= 2;
    ++e;
  }
  if (e > bias) return static_cast<std::uint16_t>(sign | all_ones);  // overflow: infinity
  auto qi = static_cast<std::uint32_t>(q);
  if (qi < (1u << mantissa)) return static_cast<std::uint16_t>(sign | qi);  // subnormal or zero
  return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(e + bias) << mantissa |
                                    (qi - (1u << mantissa)));
}

inline double decode(std::uint16_t bits, int mantissa, int exponent_bits) {
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const std::uint32_t e = (bits >> mantissa) & ((1u << exponent_bits) - 1);
  const std::uint32_t f = bits & ((1u << mantissa) - 1);
  const double sign = (bits >> (mantissa + exponent_bits)) & 1 ? -1.0 : 1.0;
  if (e == (1u << exponent_bits) - 1) return f != 0 ? NAN : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(static_cast<double>(f), 1 - bias - mantissa);
  return sign *
         std::ldexp(static_cast<double>(f | 1u << mantissa), static_cast<int>(e) - bias - mantissa);
}

}  // namespace float_bits_detail

// IEEE binary16: 10 mantissa bits, 5 exponent bits.
inline std::uint16_t f16_bits(double x) {
  return float_bits_detail::encode(x, 10, 5);
}
inline double f16_value(std::uint16_t bits) {
  return float_bits_detail::decode(bits, 10, 5);
}
// bfloat16: f32's upper half, 7 mantissa bits, 8 exponent bits.
inline std::uint16_t bf16_bits(double x) {
  return float_bits_detail::encode(x, 7, 8);
}
inline double bf16_value(std::uint16_t bits) {
  return float_bits_detail::decode(bits, 7, 8);
}
// `x` as it reads back once stored in f16 or bf16.
inline double f16_rounded(double x) {
  return f16_value(f16_bits(x));
}
inline double bf16_rounded(double x) {
  return bf16_value(bf16_bits(x));
}

}  // namespace kiln::test
