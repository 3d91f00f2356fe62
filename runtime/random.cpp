// Philox-4x32-10 and the random factories built on it.
#include "runtime/random.h"

#include <cmath>
#include <numbers>

#include "runtime/factories.h"
#include "runtime/trace_hooks.h"

namespace kiln {

std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> c,
                                        std::array<std::uint32_t, 2> k) {
  constexpr std::uint32_t kMul0 = 0xD2511F53, kMul1 = 0xCD9E8D57;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9, kWeyl1 = 0xBB67AE85;
  for (int round = 0; round < 10; ++round) {
    std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c[0];
    std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c[2];
    c = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<std::uint32_t>(p0)};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
  return c;
}

Generator& default_generator() {
  static Generator gen(0);
  return gen;
}
void manual_seed(std::uint64_t seed) { default_generator().manual_seed(seed); }

namespace {

// n 32-bit words: word i is output (i % 4) of counter (offset + i / 4).
std::vector<std::uint32_t> random_words(std::int64_t n, Generator* gen) {
  Generator& g = gen ? *gen : default_generator();
  std::uint64_t blocks = static_cast<std::uint64_t>(n + 3) / 4;
  std::uint64_t start = g.advance(blocks);
  std::array<std::uint32_t, 2> key = {static_cast<std::uint32_t>(g.seed()),
                                      static_cast<std::uint32_t>(g.seed() >> 32)};
  std::vector<std::uint32_t> words(static_cast<std::size_t>(blocks) * 4);
  for (std::uint64_t b = 0; b < blocks; ++b) {
    std::uint64_t ctr = start + b;
    auto out = philox4x32({static_cast<std::uint32_t>(ctr), static_cast<std::uint32_t>(ctr >> 32),
                           0, 0},
                          key);
    for (int j = 0; j < 4; ++j) words[b * 4 + j] = out[j];
  }
  words.resize(n);
  return words;
}

// 24 random bits -> a float on [0, 1) exactly representable in f32.
double to_unit(std::uint32_t w) { return static_cast<double>(w >> 8) * 0x1.0p-24; }

// As many random bits as `dtype` has significand bits, so that every value on [0, 1) is exact
// in it: rounding a 24-bit uniform to f16/bf16 could otherwise give 1.0.
double to_unit(std::uint32_t w, DType dtype) {
  int bits = dtype == DType::f16 ? 11 : dtype == DType::bf16 ? 8 : 24;
  return std::ldexp(static_cast<double>(w >> (32 - bits)), -bits);
}

void check_float(DType dtype, const char* op) {
  KILN_CHECK_AS(DTypeError, is_floating(dtype), "{}: dtype must be floating, got {}", op, dtype);
}

}  // namespace

Tensor rand(const Shape& shape, DType dtype, Generator* gen) {
  check_not_tracing("rand");
  check_float(dtype, "rand");
  auto words = random_words(numel(shape), gen);
  std::vector<double> values(words.size());
  for (std::size_t i = 0; i < words.size(); ++i) values[i] = to_unit(words[i], dtype);
  return convert(from_vector(values, shape), dtype);
}

Tensor randn(const Shape& shape, DType dtype, Generator* gen) {
  check_not_tracing("randn");
  check_float(dtype, "randn");
  std::int64_t n = numel(shape);
  auto words = random_words(n + (n & 1), gen);
  std::vector<double> values(n);
  for (std::int64_t i = 0; i < n; i += 2) {
    double u1 = 1.0 - to_unit(words[i]);  // (0, 1]: log stays finite
    double u2 = to_unit(words[i + 1]);
    double r = std::sqrt(-2.0 * std::log(u1));
    values[i] = r * std::cos(2 * std::numbers::pi * u2);
    if (i + 1 < n) values[i + 1] = r * std::sin(2 * std::numbers::pi * u2);
  }
  return convert(from_vector(values, shape), dtype);
}

Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, DType dtype,
               Generator* gen) {
  check_not_tracing("randint");
  KILN_CHECK(low < high, "randint: low ({}) must be less than high ({})", low, high);
  KILN_CHECK_AS(DTypeError, dtype != DType::bool_, "randint: dtype bool is not supported");
  auto words = random_words(2 * numel(shape), gen);
  auto range = static_cast<std::uint64_t>(high - low);
  std::vector<std::int64_t> values(numel(shape));
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::uint64_t w = (static_cast<std::uint64_t>(words[2 * i]) << 32) | words[2 * i + 1];
    values[i] = low + static_cast<std::int64_t>(w % range);
  }
  return convert(from_vector(values, shape), dtype);
}

}  // namespace kiln
