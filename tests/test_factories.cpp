// Tensor factories (zeros, ones, full, scalar_tensor, arange, linspace, eye, from_vector) and the
// random ones: Philox-4x32-10 against the Random123 known-answer vectors and an independent
// implementation written here from the paper, the counter layout of a draw, seeding, loose
// statistical checks of rand, randn and randint, the random ops' element mapping on the CPU
// (support/random_reference.h), the *_like factories and bernoulli.
#include <boost/test/unit_test.hpp>

#include <array>
#include <cmath>
#include <set>

#include "runtime/dispatch.h"
#include "support/random_reference.h"
#include "support/reference.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// Philox-4x32-10 as specified by Salmon et al. (SC11), written independently of runtime/random.cpp:
// the key is bumped before every round but the first.
std::array<std::uint32_t, 4> reference_philox(std::array<std::uint32_t, 4> x,
                                              std::array<std::uint32_t, 2> k) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k[0] += 0x9E3779B9u;
      k[1] += 0xBB67AE85u;
    }
    std::uint64_t a = 0xD2511F53ull * x[0];
    std::uint64_t b = 0xCD9E8D57ull * x[2];
    std::uint32_t hi0 = static_cast<std::uint32_t>(a >> 32), lo0 = static_cast<std::uint32_t>(a);
    std::uint32_t hi1 = static_cast<std::uint32_t>(b >> 32), lo1 = static_cast<std::uint32_t>(b);
    x = {hi1 ^ x[1] ^ k[0], lo1, hi0 ^ x[3] ^ k[1], lo0};
  }
  return x;
}

// Word i of a draw that starts at counter `offset` under `seed`.
std::uint32_t reference_word(std::uint64_t seed, std::uint64_t offset, std::uint64_t i) {
  std::uint64_t ctr = offset + i / 4;
  auto out = reference_philox(
      {static_cast<std::uint32_t>(ctr), static_cast<std::uint32_t>(ctr >> 32), 0, 0},
      {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
  return out[i % 4];
}

}  // namespace

BOOST_AUTO_TEST_SUITE(factories)

// ---- constants ----

BOOST_AUTO_TEST_CASE(zeros_ones_and_full_in_every_dtype) {
  for (DType t : kAllDTypes) {
    BOOST_TEST_CONTEXT(dtype_name(t)) {
      check_values(zeros({2, 3}, t), {2, 3}, t, std::vector<double>(6, 0));
      check_values(ones({3}, t), {3}, t, std::vector<double>(3, 1));
      double v = t == DType::bool_ ? 1 : is_integral(t) ? -7 : -2.5;
      check_values(full({2, 2}, v, t), {2, 2}, t, std::vector<double>(4, v));
      BOOST_TEST(full({2}, 1, t).is_contiguous());
    }
  }
  check_values(full({3}, 0.1, DType::f16), {3}, DType::f16,
               std::vector<double>(3, static_cast<float>(f16(0.1f))));
  check_values(zeros({0, 4}), {0, 4}, {});
  Tensor like = i32s({1, 2, 3}, {3});
  check_values(zeros_like(like), {3}, DType::i32, {0, 0, 0});
  check_values(ones_like(like), {3}, DType::i32, {1, 1, 1});
  check_values(full_like(like, 4), {3}, DType::i32, {4, 4, 4});
}

BOOST_AUTO_TEST_CASE(scalar_tensor_is_zero_dimensional) {
  Tensor s = scalar_tensor(2.5);
  BOOST_TEST(s.dim() == 0);
  BOOST_TEST(s.numel() == 1);
  BOOST_TEST(s.dtype() == DType::f32);
  BOOST_TEST(s.item() == 2.5);
  BOOST_TEST(scalar_tensor(-3, DType::i64).item<std::int64_t>() == -3);
  BOOST_TEST(scalar_tensor(0.1, DType::f64).item() == 0.1);
}

BOOST_AUTO_TEST_CASE(arange_walks_half_open_ranges) {
  check_values(arange(5), {5}, DType::i64, {0, 1, 2, 3, 4});
  check_values(arange(2, 11, 3), {3}, DType::i64, {2, 5, 8});
  check_values(arange(5, 0, -1), {5}, DType::i64, {5, 4, 3, 2, 1});
  check_values(arange(3, -3, -2, DType::i32), {3}, DType::i32, {3, 1, -1});
  check_values(arange(4, 4), {0}, {});
  check_values(arange(0, 1, 0.25, DType::f32), {4}, DType::f32, {0, 0.25, 0.5, 0.75});
  check_values(arange(1, -0.5, -0.5, DType::f64), {3}, DType::f64, {1, 0.5, 0});
  Tensor tenth = arange(0, 1, 0.1, DType::f64);
  BOOST_TEST(tenth.numel() == 10);
  auto v = tenth.to_vector<double>();
  for (int i = 0; i < 10; ++i) BOOST_TEST(v[i] == i * 0.1);
  check_values(arange(6, DType::f32), {6}, DType::f32, {0, 1, 2, 3, 4, 5});
}

BOOST_AUTO_TEST_CASE(linspace_hits_both_endpoints_exactly) {
  check_values(linspace(0, 1, 5), {5}, DType::f32, {0, 0.25, 0.5, 0.75, 1});
  Tensor l = linspace(-1, 0.3, 7, DType::f64);
  auto v = l.to_vector<double>();
  BOOST_TEST(v.front() == -1.0);
  BOOST_TEST(v.back() == 0.3);
  for (int i = 0; i < 7; ++i) BOOST_TEST(std::abs(v[i] - (-1 + 1.3 * i / 6)) < 1e-15);
  check_values(linspace(10, 0, 3, DType::i64), {3}, DType::i64, {10, 5, 0});
  check_values(linspace(4, 9, 1), {1}, {4});
  check_values(linspace(4, 9, 0), {0}, {});
  check_values(linspace(0.1, 0.7, 2), {2}, {static_cast<float>(0.1), static_cast<float>(0.7)});
}

BOOST_AUTO_TEST_CASE(eye_is_one_on_the_diagonal_for_square_and_rectangular_shapes) {
  check_values(eye(3), {3, 3}, DType::f32, {1, 0, 0, 0, 1, 0, 0, 0, 1});
  check_values(eye(2, 4), {2, 4}, {1, 0, 0, 0, 0, 1, 0, 0});
  check_values(eye(4, 2, DType::i64), {4, 2}, DType::i64, {1, 0, 0, 1, 0, 0, 0, 0});
  check_values(eye(0), {0, 0}, {});
}

BOOST_AUTO_TEST_CASE(from_vector_and_tensor_literals_fill_a_shape) {
  check_values(tensor({1, 2, 3}), {3}, DType::f32, {1, 2, 3});
  check_values(tensor({1, 2, 3, 4, 5, 6}, {2, 3}), {2, 3}, {1, 2, 3, 4, 5, 6});
  check_values(tensor({5}, {}), {}, {5});
  check_values(from_vector(std::vector<std::int32_t>{1, -2}), {2}, DType::i32, {1, -2});
  check_values(from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}, DType::f16), {2, 2}, DType::f16,
               {1, 2, 3, 4});
  check_values(from_vector(std::vector<bool>{true, false, true}), {3}, DType::bool_, {1, 0, 1});
  BOOST_CHECK_EXCEPTION(tensor({1, 2, 3, 4, 5}, {2, 3}), ShapeError,
                        message_has({"from_vector", "5", "[2, 3]"}));
  BOOST_CHECK_EXCEPTION(from_vector(std::vector<float>{1, 2}, {3}), ShapeError,
                        message_has({"from_vector", "[3]"}));
}

// ---- Philox ----

BOOST_AUTO_TEST_CASE(philox4x32_10_matches_random123_known_answers) {
  // Random123 tests/kat_vectors, the three "philox4x32 10" lines.
  struct Kat {
    std::array<std::uint32_t, 4> ctr;
    std::array<std::uint32_t, 2> key;
    std::array<std::uint32_t, 4> out;
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const auto& k : kats) {
    auto got = philox4x32(k.ctr, k.key);
    for (int i = 0; i < 4; ++i) BOOST_TEST(got[i] == k.out[i]);
    auto ref = reference_philox(k.ctr, k.key);
    for (int i = 0; i < 4; ++i) BOOST_TEST(ref[i] == k.out[i]);
  }
}

BOOST_AUTO_TEST_CASE(philox4x32_matches_independent_implementation_on_many_inputs) {
  auto bits = host_random(600, 0, 4294967296.0, 7);
  for (std::size_t i = 0; i < 600; i += 6) {
    std::array<std::uint32_t, 4> c;
    std::array<std::uint32_t, 2> k;
    for (int j = 0; j < 4; ++j) c[j] = static_cast<std::uint32_t>(bits[i + j]);
    for (int j = 0; j < 2; ++j) k[j] = static_cast<std::uint32_t>(bits[i + 4 + j]);
    BOOST_TEST((philox4x32(c, k) == reference_philox(c, k)));
  }
}

// ---- random tensors ----

BOOST_AUTO_TEST_CASE(rand_element_i_comes_from_word_i_of_consecutive_counters) {
  const std::uint64_t seed = 0x123456789abcdefull;
  Generator gen(seed);
  Tensor a = rand({2, 3}, DType::f64, &gen);
  BOOST_TEST(gen.offset() == 2u);  // 6 words use two 4-word counters
  auto v = a.to_vector<double>();
  for (std::uint64_t i = 0; i < 6; ++i)
    BOOST_TEST(v[i] == static_cast<double>(reference_word(seed, 0, i) >> 8) * 0x1.0p-24);
  Tensor b = rand({5}, DType::f32, &gen);  // continues at counter 2
  BOOST_TEST(gen.offset() == 4u);
  auto w = b.to_vector<double>();
  for (std::uint64_t i = 0; i < 5; ++i)
    BOOST_TEST(w[i] == static_cast<double>(reference_word(seed, 2, i) >> 8) * 0x1.0p-24);
}

BOOST_AUTO_TEST_CASE(same_seed_gives_same_numbers_and_different_seeds_differ) {
  Generator g1(42), g2(42), g3(43);
  auto a = rand({100}, DType::f32, &g1).to_vector<float>();
  auto b = rand({100}, DType::f32, &g2).to_vector<float>();
  auto c = rand({100}, DType::f32, &g3).to_vector<float>();
  BOOST_TEST(a == b, boost::test_tools::per_element());
  int same = 0;
  for (int i = 0; i < 100; ++i) same += a[i] == c[i];
  BOOST_TEST(same < 5);
  // A second draw from the same generator continues the stream.
  auto a2 = rand({100}, DType::f32, &g1).to_vector<float>();
  BOOST_TEST(a2 != a);
  // manual_seed resets the default generator.
  manual_seed(7);
  auto d1 = randn({10}).to_vector<float>();
  auto i1 = randint(0, 1000, {10}).to_vector<std::int64_t>();
  manual_seed(7);
  auto d2 = randn({10}).to_vector<float>();
  auto i2 = randint(0, 1000, {10}).to_vector<std::int64_t>();
  BOOST_TEST(d1 == d2, boost::test_tools::per_element());
  BOOST_TEST(i1 == i2, boost::test_tools::per_element());
  Generator h(5);
  h.advance(3);
  h.manual_seed(9);
  BOOST_TEST(h.offset() == 0u);
  BOOST_TEST(h.seed() == 9u);
}

BOOST_AUTO_TEST_CASE(rand_is_uniform_on_zero_to_one) {
  Generator gen(1);
  const int n = 100000;
  auto v = rand({n}, DType::f64, &gen).to_vector<double>();
  double sum = 0, sq = 0, lo = 1, hi = 0;
  int below_tenth = 0;
  for (double x : v) {
    sum += x;
    sq += x * x;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    below_tenth += x < 0.1;
  }
  double mean = sum / n, var = sq / n - mean * mean;
  BOOST_TEST(lo >= 0.0);
  BOOST_TEST(hi < 1.0);
  BOOST_TEST(std::abs(mean - 0.5) < 0.005);  // sd of the mean ~ 0.0009
  BOOST_TEST(std::abs(var - 1.0 / 12) < 0.002);
  BOOST_TEST(std::abs(below_tenth / double(n) - 0.1) < 0.005);
}

BOOST_AUTO_TEST_CASE(rand_in_half_precision_stays_below_one) {
  for (DType t : {DType::f16, DType::bf16, DType::f32}) {
    BOOST_TEST_CONTEXT(dtype_name(t)) {
      Generator gen(3);
      Tensor r = rand({20000}, t, &gen);
      BOOST_TEST(r.dtype() == t);
      auto v = r.to_vector<double>();
      double lo = *std::min_element(v.begin(), v.end());
      double hi = *std::max_element(v.begin(), v.end());
      BOOST_TEST(lo >= 0.0);
      BOOST_TEST(hi < 1.0);
      double mean = 0;
      for (double x : v) mean += x / v.size();
      BOOST_TEST(std::abs(mean - 0.5) < 0.02);
    }
  }
}

BOOST_AUTO_TEST_CASE(randn_has_zero_mean_and_unit_variance) {
  Generator gen(11);
  const int n = 100001;  // odd: the last pair is half used
  auto v = randn({n}, DType::f64, &gen).to_vector<double>();
  double sum = 0, sq = 0;
  int within_one = 0;
  for (double x : v) {
    BOOST_REQUIRE(std::isfinite(x));
    sum += x;
    sq += x * x;
    within_one += std::abs(x) < 1;
  }
  double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  BOOST_TEST(std::abs(mean) < 0.02);
  BOOST_TEST(std::abs(sd - 1) < 0.02);
  BOOST_TEST(std::abs(within_one / double(n) - 0.6827) < 0.01);
  Tensor h = randn({4, 5}, DType::bf16, &gen);
  BOOST_TEST(h.dtype() == DType::bf16);
  BOOST_TEST(shape_str(h.shape()) == "[4, 5]");
}

BOOST_AUTO_TEST_CASE(randint_stays_in_range_and_hits_every_value) {
  Generator gen(5);
  auto v = randint(-3, 4, {5000}, DType::i64, &gen).to_vector<std::int64_t>();
  std::set<std::int64_t> seen(v.begin(), v.end());
  BOOST_TEST(seen.size() == 7u);
  BOOST_TEST(*seen.begin() == -3);
  BOOST_TEST(*seen.rbegin() == 3);
  int zeros_count = 0;
  for (auto x : v) zeros_count += x == 0;
  BOOST_TEST(std::abs(zeros_count / 5000.0 - 1.0 / 7) < 0.03);
  Tensor r = randint(0, 2, {3, 4}, DType::i32, &gen);
  BOOST_TEST(r.dtype() == DType::i32);
  for (auto x : r.to_vector<std::int64_t>()) BOOST_TEST((x == 0 || x == 1));
  check_values(randint(9, 10, {3}, DType::i64, &gen), {3}, {9, 9, 9});
}

BOOST_AUTO_TEST_CASE(rand_takes_the_significand_bits_of_its_dtype_from_word_i) {
  const std::uint64_t seed = 0xfedcba9876543210ull;
  for (auto [dtype, bits] :
       {std::pair{DType::f16, 11}, {DType::bf16, 8}, {DType::f32, 24}, {DType::f64, 24}}) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      Generator gen(seed);
      gen.advance(5);
      auto v = rand({3, 7}, dtype, &gen).to_vector<double>();
      BOOST_TEST(gen.offset() == 5u + 6u);  // 21 words: six counters
      for (std::uint64_t i = 0; i < v.size(); ++i)
        BOOST_TEST(v[i] == uniform_reference(seed, 5, i, bits), "element " << i);
    }
  }
}

BOOST_AUTO_TEST_CASE(randn_element_i_is_box_muller_on_the_words_of_its_pair) {
  const std::uint64_t seed = 99;
  Generator gen(seed);
  auto v = randn({7}, DType::f64, &gen).to_vector<double>();  // odd: the last sine is unused
  BOOST_TEST(gen.offset() == 2u);                             // 8 words
  for (std::uint64_t i = 0; i < v.size(); ++i)
    BOOST_TEST(v[i] == normal_reference(seed, 0, i), "element " << i);
  // f32 and bf16 round the double result once.
  for (DType dtype : {DType::f32, DType::bf16}) {
    auto r = randn({5, 3}, dtype, &gen).to_vector<double>();
    for (std::uint64_t i = 0; i < r.size(); ++i) {
      double want = round_to(dtype, normal_reference(seed, 2, i));
      BOOST_TEST(r[i] == want, dtype_name(dtype) << " element " << i);
    }
    BOOST_TEST(gen.offset() == 6u);  // 16 words
    gen = Generator(seed);
    gen.advance(2);
  }
}

BOOST_AUTO_TEST_CASE(randint_element_i_takes_words_2i_and_2i_plus_1) {
  const std::uint64_t seed = 0x0123456789abcdefull;
  Generator gen(seed);
  const std::int64_t low = -(std::int64_t{1} << 40), high = (std::int64_t{1} << 41) + 3;
  auto v = randint(low, high, {9}, DType::i64, &gen).to_vector<std::int64_t>();
  BOOST_TEST(gen.offset() == 5u);  // 18 words
  for (std::uint64_t i = 0; i < v.size(); ++i) {
    BOOST_TEST(v[i] == int_reference(seed, 0, i, low, high), "element " << i);
    BOOST_TEST((v[i] >= low && v[i] < high));
  }
  // The whole i64 range wraps instead of overflowing.
  const std::int64_t lowest = std::numeric_limits<std::int64_t>::min();
  const std::int64_t highest = std::numeric_limits<std::int64_t>::max();
  auto w = randint(lowest, highest, {4}, DType::i64, &gen).to_vector<std::int64_t>();
  for (std::uint64_t i = 0; i < w.size(); ++i)
    BOOST_TEST(w[i] == int_reference(seed, 5, i, lowest, highest), "element " << i);
}

BOOST_AUTO_TEST_CASE(a_draw_advances_its_generator_by_the_counters_its_words_take) {
  for (OpId op : {OpId::random_uniform, OpId::random_normal, OpId::random_int}) {
    for (std::int64_t n : {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17}) {
      BOOST_TEST_CONTEXT(op_name(op) << " of " << n) {
        Generator gen(1);
        gen.advance(3);
        if (op == OpId::random_uniform) rand({n}, DType::f32, &gen);
        if (op == OpId::random_normal) randn({n}, DType::f32, &gen);
        if (op == OpId::random_int) randint(0, 10, {n}, DType::i64, &gen);
        BOOST_TEST(gen.offset() == 3 + counters_reference(op, static_cast<std::uint64_t>(n)));
        BOOST_TEST(random_counters(op, n) == counters_reference(op, static_cast<std::uint64_t>(n)));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(random_ops_are_functions_of_their_seed_offset_and_element_index) {
  auto number = [](std::int64_t v) { return from_vector(std::vector<std::int64_t>{v}, Shape{}); };
  OpAttrs attrs;
  attrs.shape = {2, 5};
  attrs.dtype = DType::f64;
  const std::int64_t seed = -7;  // the bits of a seed past 2^63
  const Tensor in[] = {number(seed), number(41)};
  auto u = dispatch1(OpId::random_uniform, in, attrs).to_vector<double>();
  auto n = dispatch1(OpId::random_normal, in, attrs).to_vector<double>();
  attrs.low = 10;
  attrs.high = 20;
  attrs.dtype = DType::i32;
  Tensor k = dispatch1(OpId::random_int, in, attrs);
  BOOST_TEST(k.dtype() == DType::i32);
  auto kv = k.to_vector<std::int64_t>();
  for (std::uint64_t i = 0; i < 10; ++i) {
    auto s = static_cast<std::uint64_t>(seed);
    BOOST_TEST(u[i] == uniform_reference(s, 41, i, 24));
    BOOST_TEST(n[i] == normal_reference(s, 41, i));
    BOOST_TEST(kv[i] == int_reference(s, 41, i, 10, 20));
  }
  attrs.shape = {0, 3};
  BOOST_TEST(dispatch1(OpId::random_int, in, attrs).numel() == 0);
}

BOOST_AUTO_TEST_CASE(like_factories_take_the_shape_dtype_and_device_of_their_argument) {
  Tensor x = zeros({2, 3}, DType::bf16);
  Generator a(4), b(4);
  Tensor r = rand_like(x, &a);
  BOOST_TEST(r.dtype() == DType::bf16);
  BOOST_TEST(shape_str(r.shape()) == "[2, 3]");
  auto rv = r.to_vector<double>();
  for (std::uint64_t i = 0; i < 6; ++i) BOOST_TEST(rv[i] == uniform_reference(4, 0, i, 8));
  Tensor g = randn_like(x, &a);
  auto gv = g.to_vector<double>();
  for (std::uint64_t i = 0; i < 6; ++i)
    BOOST_TEST(gv[i] == round_to(DType::bf16, normal_reference(4, 2, i)));
  Tensor k = randint_like(i32s({0, 0, 0}, {3}), -4, 4, &b);
  BOOST_TEST(k.dtype() == DType::i32);
  auto kv = k.to_vector<std::int64_t>();
  for (std::uint64_t i = 0; i < 3; ++i) BOOST_TEST(kv[i] == int_reference(4, 0, i, -4, 4));
  BOOST_TEST(a.offset() == 4u);
  BOOST_TEST(b.offset() == 2u);
}

BOOST_AUTO_TEST_CASE(bernoulli_is_one_where_a_uniform_is_below_p) {
  const std::vector<double> p = {0, 0.25, 0.5, 0.75, 1, 0.1, 0.9, 0.5, 0.3, 0.6};
  for (DType dtype : {DType::f32, DType::f64, DType::f16}) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      Tensor pt = typed(dtype, p, {2, 5});
      auto pv = pt.to_vector<double>();
      Generator gen(12);
      Tensor b = bernoulli(pt, &gen);
      BOOST_TEST(b.dtype() == dtype);
      BOOST_TEST(!b.requires_grad());
      BOOST_TEST(gen.offset() == 3u);
      auto bv = b.to_vector<double>();
      // Uniforms of 24 bits (f32 ones for f16 probabilities).
      for (std::uint64_t i = 0; i < 10; ++i)
        BOOST_TEST(bv[i] == (uniform_reference(12, 0, i, 24) < pv[i] ? 1.0 : 0.0), "element " << i);
    }
  }
  Generator gen(13);
  auto c = bernoulli(zeros({40}, DType::i64), 0.3, &gen);
  BOOST_TEST(c.dtype() == DType::i64);
  auto cv = c.to_vector<double>();
  for (std::uint64_t i = 0; i < 40; ++i)
    BOOST_TEST(cv[i] == (uniform_reference(13, 0, i, 24) < static_cast<float>(0.3) ? 1.0 : 0.0));
  // Over many draws the mean is p.
  Generator many(14);
  double mean = bernoulli(full({20000}, 0.3), &many).sum().item() / 20000;
  BOOST_TEST(std::abs(mean - 0.3) < 4 * std::sqrt(0.3 * 0.7 / 20000));
}

BOOST_AUTO_TEST_CASE(random_factories_reject_bad_arguments) {
  KILN_CHECK_THROWS(rand_like(i64s({1, 2})), DTypeError, "rand_like", "i64");
  KILN_CHECK_THROWS(randn_like(bools({true}, {1})), DTypeError, "randn_like", "bool");
  KILN_CHECK_THROWS(randint_like(bools({true}, {1}), 0, 2), DTypeError, "randint_like", "bool");
  KILN_CHECK_THROWS(randint_like(i64s({1}), 5, -5), Error, "randint_like", "5", "-5");
  KILN_CHECK_THROWS(bernoulli(f32s({0.5f, 1.5f})), Error, "bernoulli", "1.5");
  KILN_CHECK_THROWS(bernoulli(f32s({-0.25f, 0.5f})), Error, "bernoulli", "-0.25");
  KILN_CHECK_THROWS(bernoulli(f32s({NAN})), Error, "bernoulli", "nan");
  KILN_CHECK_THROWS(bernoulli(i64s({0, 1})), DTypeError, "bernoulli", "i64");
  KILN_CHECK_THROWS(bernoulli(zeros({2}), 1.25), Error, "bernoulli", "1.25");
  KILN_CHECK_THROWS(bernoulli(zeros({2}), -0.5), Error, "bernoulli", "-0.5");
  // The ops themselves: numbers of the wrong kind, a dtype or range they cannot draw.
  OpAttrs attrs;
  attrs.shape = {2};
  Tensor seed = from_vector(std::vector<std::int64_t>{1}, Shape{});
  const Tensor float_seed[] = {scalar_tensor(1.0), seed};
  KILN_CHECK_THROWS(dispatch1(OpId::random_uniform, float_seed, attrs), DTypeError,
                    "random_uniform", "seed", "f32");
  const Tensor vector_offset[] = {seed, i64s({1, 2})};
  KILN_CHECK_THROWS(dispatch1(OpId::random_normal, vector_offset, attrs), DTypeError,
                    "random_normal", "offset", "[2]");
  const Tensor numbers[] = {seed, seed};
  attrs.dtype = DType::i32;
  KILN_CHECK_THROWS(dispatch1(OpId::random_uniform, numbers, attrs), DTypeError, "random_uniform",
                    "i32");
  attrs.low = attrs.high = 3;
  KILN_CHECK_THROWS(dispatch1(OpId::random_int, numbers, attrs), Error, "random_int", "3");
  // A refused draw leaves its generator where it was.
  Generator gen(1);
  KILN_CHECK_THROWS(rand({2, -1}, DType::f32, &gen), ShapeError, "random_uniform", "[2, -1]");
  BOOST_TEST(gen.offset() == 0u);

  BOOST_CHECK_EXCEPTION(rand({2}, DType::i64), DTypeError, message_has({"rand", "i64"}));
  BOOST_CHECK_EXCEPTION(randn({2}, DType::bool_), DTypeError, message_has({"randn", "bool"}));
  BOOST_CHECK_EXCEPTION(randint(3, 3, {2}), Error, message_has({"randint", "3"}));
  BOOST_CHECK_EXCEPTION(randint(0, 2, {2}, DType::bool_), DTypeError,
                        message_has({"randint", "bool"}));
  BOOST_CHECK_EXCEPTION(arange(0, 5, 0), Error, message_has({"arange", "step"}));
  BOOST_CHECK_EXCEPTION(arange(0, 5, -1), Error, message_has({"arange", "-1"}));
}

BOOST_AUTO_TEST_SUITE_END()
