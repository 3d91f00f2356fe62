// Seeded random tensors from a counter-based generator (Philox-4x32-10, Salmon et al. 2011):
// element i of a draw depends only on (seed, offset, i), so the same seed gives the same numbers
// on every device and in any evaluation order.
//
// A draw is an op of the table (runtime/ops.def: random_uniform, random_normal, random_int) with
// two number inputs, the generator's seed and the offset of the draw's first counter, so it runs
// as a CPU kernel or a generated CUDA kernel alike. Word j of a draw is output j % 4 of
// philox4x32(counter = offset + j / 4 as {lo, hi, 0, 0}, key = {seed lo, seed hi}); element i of
// the output (row-major) is:
//   - random_uniform: the top uniform_bits(dtype) bits of word i, times 2^-bits (exact in the
//     dtype, so never 1.0);
//   - random_normal: Box-Muller on words w0 = 2 (i / 2) and w1 = w0 + 1, with 24-bit uniforms
//     u1 = 1 - unit(w0) (in (0, 1]) and u2 = unit(w1): r = sqrt(-2 log u1), then r cos(2 pi u2)
//     for even i and r sin(2 pi u2) for odd i;
//   - random_int: low + (words 2i and 2i + 1 as the high and low halves of 64 bits) mod
//     (high - low).
// The CPU computes in double and rounds once to the dtype. A CUDA kernel computes the same
// integers, so uniform and integer draws are bit for bit the CPU's; its normal uses logf, sqrtf
// and sincospif(2 u2) in f32 (log, sqrt and sincospi in f64). Measured against the CPU's over
// 2^18 draws, in ulps at max(|x|, 1): f32 within 2 (1.2e-7 of 1 + |x|), f16/bf16 within 1, f64
// within 12, where the CPU's cos(2 pi u2) is the less exact (its argument rounds).
// Under tracing a draw is recorded, not made (OpInterceptor::on_random_draw): its seed and
// offset are inputs of the compiled function, read from the Generator at every call, which
// advances it by random_counters(op, numel) at that call's sizes, as the eager draw would.
#pragma once

#include <array>
#include <cstdint>

#include "runtime/op.h"
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

// The random bits of a uniform in `dtype`: its significand's (f16 11, bf16 8), else 24.
int uniform_bits(DType dtype);
// The counters a draw of `numel` elements of random op `op` reads, by which it advances its
// generator: uniform ceil(n / 4), normal ceil((n + n % 2) / 4), int ceil(2n / 4).
std::uint64_t random_counters(OpId op, std::int64_t numel);

// The seed and offset (0-dim i64 host tensors) of a draw of random op `op` with attrs' shape from
// `gen` (the default generator when null), which it advances; while tracing, the trace's inputs
// that stand for them (OpInterceptor::random_inputs). For ops that draw inside another kernel
// (attention's dropout).
std::array<Tensor, 2> draw_inputs(OpId op, const OpAttrs& attrs, Generator* gen);
// A seed or an offset as a draw takes it: a 0-dim i64 host tensor holding its 64 bits.
Tensor draw_number(std::uint64_t x);

// Uniform on [0, 1).
Tensor rand(const Shape& shape, DType dtype = DType::f32, Generator* gen = nullptr,
            Device device = Device::cpu());
// Standard normal (Box-Muller on pairs of uniforms).
Tensor randn(const Shape& shape, DType dtype = DType::f32, Generator* gen = nullptr,
             Device device = Device::cpu());
// Integers uniform on [low, high).
Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, DType dtype = DType::i64,
               Generator* gen = nullptr, Device device = Device::cpu());
// The same, with x's shape, dtype and device.
Tensor rand_like(const Tensor& x, Generator* gen = nullptr);
// Uniforms of `dtype` shaped as x (a dropout mask of f16 x compares f32 uniforms).
Tensor rand_like(const Tensor& x, DType dtype, Generator* gen = nullptr);
Tensor randn_like(const Tensor& x, Generator* gen = nullptr);
Tensor randint_like(const Tensor& x, std::int64_t low, std::int64_t high, Generator* gen = nullptr);

}  // namespace kiln
