// Rounding to narrower float formats, done once in long double so no double rounding occurs.
#include "runtime/cuda/virtual/float_format.h"

#include <cmath>
#include <cstring>

namespace kiln::cuda::vgpu {
namespace {

struct FormatInfo {
  int exp_bits, mant_bits;
};

constexpr FormatInfo info(FloatFormat f) {
  switch (f) {
    case FloatFormat::f16:
      return {5, 10};
    case FloatFormat::bf16:
      return {8, 7};
    case FloatFormat::f32:
      return {8, 23};
    case FloatFormat::f64:
      return {11, 52};
  }
  return {8, 23};
}

}  // namespace

long double round_integral(long double v, Round mode) {
  switch (mode) {
    case Round::rz:
      return std::trunc(v);
    case Round::rm:
      return std::floor(v);
    case Round::rp:
      return std::ceil(v);
    case Round::rna:
      return std::round(v);
    default: {
      long double r = std::floor(v), diff = v - r;
      if (diff > 0.5L || (diff == 0.5L && std::fmod(r, 2.0L) != 0)) r += 1;
      return r;
    }
  }
}

long double decode_float(FloatFormat format, std::uint64_t bits) {
  switch (format) {
    case FloatFormat::f16:
      return half_to_float(std::uint16_t(bits));
    case FloatFormat::bf16:
      return bf16_to_float(std::uint16_t(bits));
    case FloatFormat::f32:
      return std::bit_cast<float>(std::uint32_t(bits));
    case FloatFormat::f64:
      return std::bit_cast<double>(bits);
  }
  return 0;
}

std::uint64_t encode_float(FloatFormat format, long double v, Round mode) {
  const FormatInfo fi = info(format);
  const int bias = (1 << (fi.exp_bits - 1)) - 1;
  const std::uint64_t sign = std::signbit(v) ? 1 : 0;
  const int total = 1 + fi.exp_bits + fi.mant_bits;
  const std::uint64_t exp_all = (std::uint64_t(1) << fi.exp_bits) - 1;
  auto pack = [&](std::uint64_t e, std::uint64_t m) {
    return (sign << (total - 1)) | (e << fi.mant_bits) | m;
  };
  if (std::isnan(v)) return pack(exp_all, std::uint64_t(1) << (fi.mant_bits - 1));  // canonical
  if (std::isinf(v)) return pack(exp_all, 0);
  if (v == 0) return pack(0, 0);
  long double a = std::fabs(v);
  int e2;
  std::frexp(a, &e2);  // a = m * 2^e2, m in [0.5, 1)
  int exp = e2 - 1;    // a in [2^exp, 2^(exp+1))
  const int min_exp = 1 - bias;
  // Quantum: the value of the last mantissa bit at this exponent (subnormals share min_exp's).
  int q = (exp < min_exp ? min_exp : exp) - fi.mant_bits;
  long double scaled = std::ldexp(a, -q);
  Round m = mode == Round::none ? Round::rn : mode;
  if (sign) {  // directed modes act on the signed value
    if (m == Round::rm)
      m = Round::rp;
    else if (m == Round::rp)
      m = Round::rm;
  }
  long double ri = round_integral(scaled, m);
  long double r = std::ldexp(ri, q);
  // Overflow: past the largest finite value goes to inf or max-finite depending on the mode.
  const long double max_finite =
      std::ldexp((std::ldexp(1.0L, fi.mant_bits + 1) - 1), bias - fi.mant_bits);
  if (r > max_finite) {
    bool to_inf = m == Round::rn || m == Round::rna || m == Round::rp;
    return to_inf ? pack(exp_all, 0) : pack(exp_all - 1, (std::uint64_t(1) << fi.mant_bits) - 1);
  }
  if (r == 0) return pack(0, 0);  // rounded to (signed) zero
  std::frexp(r, &e2);
  exp = e2 - 1;
  if (exp < min_exp) {  // subnormal (or rounded to zero)
    std::uint64_t mant = std::uint64_t(std::ldexp(r, fi.mant_bits - min_exp));
    return pack(0, mant);
  }
  std::uint64_t mant =
      std::uint64_t(std::ldexp(r, fi.mant_bits - exp)) & ((std::uint64_t(1) << fi.mant_bits) - 1);
  return pack(std::uint64_t(exp + bias), mant);
}

std::uint16_t float_to_half_rn(float f) {
  return std::uint16_t(encode_float(FloatFormat::f16, f, Round::rn));
}

std::uint16_t float_to_bf16_rn(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1);
  return std::uint16_t(u >> 16);
}

}  // namespace kiln::cuda::vgpu
