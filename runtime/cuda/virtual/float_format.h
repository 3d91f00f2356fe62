// Bit-exact conversions between IEEE-style formats (f16, bf16, f32, f64) with PTX rounding modes.
// Conversions go through long double, which holds every f64 and every 64-bit integer exactly.
#pragma once

#include <bit>
#include <cstdint>

namespace kiln::cuda::vgpu {

enum class Round : std::uint8_t { none, rn, rz, rm, rp, rna };

enum class FloatFormat : std::uint8_t { f16, bf16, f32, f64 };

// Value of a float of `format` stored in the low bits of `bits`; exact.
long double decode_float(FloatFormat format, std::uint64_t bits);

// `value` rounded to `format` with `mode` (Round::none = round to nearest even), as bits.
std::uint64_t encode_float(FloatFormat format, long double value, Round mode);

// Rounds to an integral value with mode kRn (ties to even), kRz, kRm, kRp.
long double round_integral(long double value, Round mode);

inline float half_to_float(std::uint16_t h) {
  // Exact: every f16 is an f32.
  std::uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    int e = 113;
    while (!(mant & 0x400u)) mant <<= 1, --e;
    bits = sign | (std::uint32_t(e) << 23) | ((mant & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

inline float bf16_to_float(std::uint16_t h) {
  return std::bit_cast<float>(std::uint32_t(h) << 16);
}

// Round-to-nearest-even f32 -> f16 / bf16 (the common case, without long double).
std::uint16_t float_to_half_rn(float f);
std::uint16_t float_to_bf16_rn(float f);

}  // namespace kiln::cuda::vgpu
