// The element mapping of the random ops (runtime/random.h) written out from its description on
// kiln::philox4x32 (which test_factories checks against Random123's known answers and an
// independent implementation): what element i of each draw must be, for tests of the CPU
// kernels and of the generated ones.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

#include "runtime/random.h"

namespace kiln::test {

// Word j of the draw at (seed, offset): output j % 4 of counter offset + j / 4.
inline std::uint32_t philox_word(std::uint64_t seed, std::uint64_t offset, std::uint64_t j) {
  std::uint64_t c = offset + j / 4;
  auto out = philox4x32({static_cast<std::uint32_t>(c), static_cast<std::uint32_t>(c >> 32), 0, 0},
                        {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
  return out[j % 4];
}

// The top `bits` bits of word i over 2^bits.
inline double uniform_reference(std::uint64_t seed, std::uint64_t offset, std::uint64_t i,
                                int bits) {
  return std::ldexp(static_cast<double>(philox_word(seed, offset, i) >> (32 - bits)), -bits);
}

// Box-Muller on words 2 (i / 2) and 2 (i / 2) + 1, in double: the cosine for even i, the sine
// for odd i.
inline double normal_reference(std::uint64_t seed, std::uint64_t offset, std::uint64_t i) {
  std::uint64_t w0 = i / 2 * 2;
  double u1 = 1.0 - uniform_reference(seed, offset, w0, 24);
  double u2 = uniform_reference(seed, offset, w0 + 1, 24);
  double r = std::sqrt(-2.0 * std::log(u1));
  double angle = 2 * std::numbers::pi * u2;
  return i % 2 == 0 ? r * std::cos(angle) : r * std::sin(angle);
}

// low + (word 2i << 32 | word 2i + 1) mod (high - low), with two's complement wrap-around.
inline std::int64_t int_reference(std::uint64_t seed, std::uint64_t offset, std::uint64_t i,
                                  std::int64_t low, std::int64_t high) {
  std::uint64_t bits = (static_cast<std::uint64_t>(philox_word(seed, offset, 2 * i)) << 32) |
                       philox_word(seed, offset, 2 * i + 1);
  std::uint64_t range = static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low);
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(low) + bits % range);
}

// The counters a draw of n elements reads, from the words it uses: n, n rounded up to a pair,
// or 2n, four to a counter.
inline std::uint64_t counters_reference(OpId op, std::uint64_t n) {
  std::uint64_t words = op == OpId::random_uniform  ? n
                        : op == OpId::random_normal ? (n + 1) / 2 * 2
                                                    : 2 * n;
  return (words + 3) / 4;
}

}  // namespace kiln::test
