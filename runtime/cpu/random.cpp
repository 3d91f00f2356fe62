// CPU kernels of the random ops (random_uniform, random_normal, random_int): Philox words turned
// into values with the element mapping runtime/random.h documents. The reference the generated
// kernels are compared with, and what rand, randn and randint run on the host.
#include <cmath>
#include <numbers>

#include "runtime/cpu/kernels.h"
#include "runtime/factories.h"
#include "runtime/random.h"

namespace kiln::cpu {

namespace {

// The four words of counter `offset + block` under `seed`: words 4 block .. 4 block + 3 of the
// draw.
std::array<std::uint32_t, 4> philox_block(std::uint64_t seed, std::uint64_t offset,
                                          std::uint64_t block) {
  std::uint64_t c = offset + block;
  return philox4x32({static_cast<std::uint32_t>(c), static_cast<std::uint32_t>(c >> 32), 0, 0},
                    {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
}

// `bits` random bits of a word as a value on [0, 1), exact in any dtype of that many
// significand bits.
double unit_of(std::uint32_t w, int bits) {
  return std::ldexp(static_cast<double>(w >> (32 - bits)), -bits);
}

// Element i uses word i.
std::vector<double> uniform_values(std::uint64_t seed, std::uint64_t offset, std::int64_t n,
                                   DType dtype) {
  std::vector<double> values(static_cast<std::size_t>(n));
  int bits = uniform_bits(dtype);
  for (std::int64_t i = 0; i < n; i += 4) {
    auto w = philox_block(seed, offset, static_cast<std::uint64_t>(i / 4));
    for (std::int64_t j = 0; j < 4 && i + j < n; ++j)
      values[static_cast<std::size_t>(i + j)] = unit_of(w[j], bits);
  }
  return values;
}

// Box-Muller on words 2 (i / 2) and 2 (i / 2) + 1: an even element takes the cosine, an odd one
// the sine. Both words of a pair are in one counter's block.
std::vector<double> normal_values(std::uint64_t seed, std::uint64_t offset, std::int64_t n) {
  std::vector<double> values(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; i += 2) {
    auto w = philox_block(seed, offset, static_cast<std::uint64_t>(i / 4));
    std::size_t k = static_cast<std::size_t>(i % 4);
    double u1 = 1.0 - unit_of(w[k], 24);  // (0, 1]: log stays finite
    double u2 = unit_of(w[k + 1], 24);
    double r = std::sqrt(-2.0 * std::log(u1));
    values[static_cast<std::size_t>(i)] = r * std::cos(2 * std::numbers::pi * u2);
    if (i + 1 < n)
      values[static_cast<std::size_t>(i + 1)] = r * std::sin(2 * std::numbers::pi * u2);
  }
  return values;
}

// Words 2i (high) and 2i + 1 (low) as 64 bits, modulo the range. Unsigned arithmetic: a range
// past 2^63 and the sum wrap as two's complement does.
std::vector<std::int64_t> int_values(std::uint64_t seed, std::uint64_t offset, std::int64_t n,
                                     std::int64_t low, std::int64_t high) {
  std::vector<std::int64_t> values(static_cast<std::size_t>(n));
  auto range = static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low);
  for (std::int64_t i = 0; i < n; ++i) {
    auto w = philox_block(seed, offset, static_cast<std::uint64_t>(i / 2));
    std::size_t k = static_cast<std::size_t>(2 * (i % 2));
    std::uint64_t bits = (static_cast<std::uint64_t>(w[k]) << 32) | w[k + 1];
    values[static_cast<std::size_t>(i)] =
        static_cast<std::int64_t>(static_cast<std::uint64_t>(low) + bits % range);
  }
  return values;
}

}  // namespace

Tensor random_draw(OpId op, std::span<const Tensor> in, const OpAttrs& attrs,
                   const TensorMeta& out) {
  auto seed = static_cast<std::uint64_t>(in[0].item<std::int64_t>());
  auto offset = static_cast<std::uint64_t>(in[1].item<std::int64_t>());
  std::int64_t n = numel(out.shape);
  // Values are computed in double (i64 for integers) and rounded once to the dtype: a uniform
  // is exact in it, a normal rounds.
  if (op == OpId::random_uniform)
    return from_vector(uniform_values(seed, offset, n, out.dtype), out.shape, out.dtype);
  if (op == OpId::random_normal)
    return from_vector(normal_values(seed, offset, n), out.shape, out.dtype);
  KILN_CHECK(op == OpId::random_int, "{}: not a random op", op);
  return from_vector(int_values(seed, offset, n, attrs.low, attrs.high), out.shape, out.dtype);
}

}  // namespace kiln::cpu
