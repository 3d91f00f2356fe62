// Seeded random tensors from a counter-based generator (Philox-4x32-10, Salmon et al. 2011):
// element i of a draw depends only on (seed, offset, i), so the same seed gives the same numbers
// on every device and in any evaluation order.
#pragma once

#include <array>
#include <cstdint>

#include "runtime/tensor.h"

namespace kiln {

// Philox-4x32-10: four 32-bit outputs for a 128-bit counter under a 64-bit key.
std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> counter,
                                        std::array<std::uint32_t, 2> key);

// A seed and a running offset; each draw advances the offset past the counters it used.
class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0) : seed_(seed) {}
  std::uint64_t seed() const { return seed_; }
  std::uint64_t offset() const { return offset_; }
  void manual_seed(std::uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  // Reserves `n` counters and returns the first.
  std::uint64_t advance(std::uint64_t n) {
    std::uint64_t start = offset_;
    offset_ += n;
    return start;
  }

 private:
  std::uint64_t seed_;
  std::uint64_t offset_ = 0;
};

// The process-wide generator used when none is passed.
Generator& default_generator();
void manual_seed(std::uint64_t seed);

// Uniform on [0, 1).
Tensor rand(const Shape& shape, DType dtype = DType::f32, Generator* gen = nullptr);
// Standard normal (Box-Muller on pairs of uniforms).
Tensor randn(const Shape& shape, DType dtype = DType::f32, Generator* gen = nullptr);
// Integers uniform on [low, high).
Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, DType dtype = DType::i64,
               Generator* gen = nullptr);

}  // namespace kiln
