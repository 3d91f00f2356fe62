// multinomial and sample_next: draws equal to hand-written inverse-CDF and key searches over the
// same uniforms, frequencies that pass chi-square tests against the distribution (fixed seeds:
// the same numbers on every run), the top-k / top-p restrictions, the CUDA kernels and compiled
// functions equal to the eager CPU draws from one seed, and the errors.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "autograd/ops.h"
#include "autograd/sampling.h"
#include "jit/compile.h"
#include "support/reference.h"

using namespace kiln;

namespace {

std::vector<std::int64_t> longs(const Tensor& t) {
  return t.to(Device::cpu()).to_vector<std::int64_t>();
}

// `rows` copies of the row `p` (one draw each gives `rows` samples of it).
Tensor repeated(const std::vector<float>& p, std::int64_t rows) {
  Tensor row = from_vector(p, {1, static_cast<std::int64_t>(p.size())});
  return expand(row, {rows, static_cast<std::int64_t>(p.size())}).contiguous();
}

// Pearson's statistic of `counts` against `expected` probabilities.
double chi_square(const std::vector<std::int64_t>& draws, const std::vector<double>& expected) {
  std::vector<double> counts(expected.size(), 0);
  for (auto d : draws) {
    BOOST_TEST_REQUIRE((d >= 0 && d < static_cast<std::int64_t>(expected.size())), "draw " << d);
    counts[d] += 1;
  }
  double n = static_cast<double>(draws.size()), stat = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    double e = expected[i] * n;
    if (e == 0) {
      BOOST_TEST(counts[i] == 0, "category " << i << " has probability 0 but was drawn");
      continue;
    }
    stat += (counts[i] - e) * (counts[i] - e) / e;
  }
  return stat;
}

std::vector<std::int64_t> column(const std::vector<std::int64_t>& v, std::size_t width,
                                 std::size_t c) {
  std::vector<std::int64_t> out;
  for (std::size_t i = c; i < v.size(); i += width) out.push_back(v[i]);
  return out;
}

// chi-square critical values at p = 0.001.
constexpr double kChi2Df1 = 10.83, kChi2Df3 = 16.27;

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_sampling)

// Weights of eighths: the cumulative sums and u * total are exact in f32, so the hand search in
// double must agree draw for draw.
BOOST_AUTO_TEST_CASE(with_replacement_is_the_inverse_cdf_of_the_generators_uniforms) {
  const std::vector<float> w = {1, 0, 2, 0, 5, 0};  // sum 8; zeros inside and at the end
  Tensor probs = repeated(w, 3);
  Generator gen(5);
  Tensor drawn = multinomial(probs, 7, true, &gen);
  BOOST_TEST(drawn.shape() == (Shape{3, 7}));
  BOOST_TEST((drawn.dtype() == DType::i64));
  Generator same(5);
  auto u = rand({3, 7}, DType::f32, &same).to_vector<float>();
  std::vector<std::int64_t> want;
  for (float x : u) {
    double target = static_cast<double>(x) * 8, cdf = 0;
    std::int64_t pick = 0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      cdf += w[i];
      if (cdf > target) {
        pick = static_cast<std::int64_t>(i);
        break;
      }
    }
    want.push_back(pick);
  }
  BOOST_TEST(longs(drawn) == want, boost::test_tools::per_element());
  BOOST_TEST(gen.offset() == same.offset());  // the same counters consumed
}

BOOST_AUTO_TEST_CASE(without_replacement_keeps_the_largest_keys_of_the_uniforms) {
  const std::vector<float> w = {0.1f, 0.25f, 0.0f, 0.4f, 0.05f, 0.2f};
  Tensor probs = repeated(w, 4);
  Generator gen(9);
  Tensor drawn = multinomial(probs, 4, false, &gen);
  Generator same(9);
  auto u = rand({4, 6}, DType::f32, &same).to_vector<float>();
  std::vector<std::int64_t> want;
  for (std::size_t r = 0; r < 4; ++r) {
    std::vector<std::int64_t> order(6);
    std::iota(order.begin(), order.end(), 0);
    auto key = [&](std::int64_t i) {
      return w[i] > 0 ? std::log(1.0 - u[r * 6 + i]) / w[i] : -INFINITY;
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](std::int64_t a, std::int64_t b) { return key(a) > key(b); });
    want.insert(want.end(), order.begin(), order.begin() + 4);
  }
  BOOST_TEST(longs(drawn) == want, boost::test_tools::per_element());
  for (std::size_t r = 0; r < 4; ++r) {
    auto row = std::vector<std::int64_t>(want.begin() + r * 4, want.begin() + r * 4 + 4);
    BOOST_TEST((std::find(row.begin(), row.end(), 2) == row.end()));  // weight 0: never drawn
  }
}

BOOST_AUTO_TEST_CASE(frequencies_pass_chi_square_with_and_without_replacement) {
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.4};
  Tensor probs = repeated({0.1f, 0.2f, 0.3f, 0.4f}, 20000);
  Generator gen(21);
  BOOST_TEST(chi_square(longs(multinomial(probs, 1, true, &gen)), p) < kChi2Df3);
  // Without replacement: the first draw follows p, the second P(j) = sum_i p_i p_j / (1 - p_i).
  auto pairs = longs(multinomial(probs, 2, false, &gen));
  BOOST_TEST(chi_square(column(pairs, 2, 0), p) < kChi2Df3);
  std::vector<double> second(4, 0);
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 4; ++j)
      if (i != j) second[j] += p[i] * p[j] / (1 - p[i]);
  BOOST_TEST(chi_square(column(pairs, 2, 1), second) < kChi2Df3);
  for (std::size_t r = 0; r < pairs.size(); r += 2) BOOST_TEST_REQUIRE(pairs[r] != pairs[r + 1]);
}

BOOST_AUTO_TEST_CASE(a_seed_reproduces_the_draws_on_cpu_cuda_and_compiled) {
  Generator gen(3);
  Tensor logits = randn({4, 300}, DType::f32, &gen) * 2.0;
  SamplingOptions options;
  options.temperature = 0.8;
  options.top_k = 40;
  options.top_p = 0.9;
  auto draw = [&](const Tensor& x, std::uint64_t seed) {
    Generator g(seed);
    return longs(sample_next(x, options, &g));
  };
  auto cpu = draw(logits, 17);
  BOOST_TEST(cpu.size() == 4u);
  BOOST_TEST(draw(logits, 17) == cpu, boost::test_tools::per_element());
  BOOST_TEST(draw(logits.to(Device::cuda()), 17) == cpu, boost::test_tools::per_element());
  Generator p_gen(4);
  Tensor probs = rand({3, 50}, DType::f32, &p_gen);
  for (bool replacement : {true, false}) {
    Generator a(8), b(8);
    BOOST_TEST(longs(multinomial(probs, 5, replacement, &a)) ==
                   longs(multinomial(probs.to(Device::cuda()), 5, replacement, &b)),
               boost::test_tools::per_element());
  }
  for (Device device : {Device::cpu(), Device::cuda()}) {
    BOOST_TEST_CONTEXT(device.str()) {
      Generator g(17);
      auto f = jit::compile([&](const Tensor& x) { return sample_next(x, options, &g); });
      Tensor x = logits.to(device);
      BOOST_TEST(longs(f(x)) == cpu, boost::test_tools::per_element());
      // The next call draws the next numbers, as eager's second call would.
      Generator twice(17);
      sample_next(logits, options, &twice);
      BOOST_TEST(longs(f(x)) == longs(sample_next(logits, options, &twice)),
                 boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(greedy_top_k_and_top_p_restrict_the_draws) {
  Tensor logits = from_vector<float>({1.0f, 3.0f, 0.5f, 2.5f}, {4});
  BOOST_TEST(sample_next(logits, {.temperature = 0}).item() == 1);
  BOOST_TEST(sample_next(logits, {.temperature = 1, .top_k = 1}).item() == 1);
  Tensor rows = expand(unsqueeze(logits, 0), {20000, 4}).contiguous();
  Generator gen(12);
  // top_k = 2: tokens 1 and 3 in the ratio e^3 : e^2.5.
  double e1 = std::exp(3.0), e3 = std::exp(2.5);
  auto two = longs(sample_next(rows, {.temperature = 1, .top_k = 2}, &gen));
  BOOST_TEST(chi_square(two, {0, e1 / (e1 + e3), 0, e3 / (e1 + e3)}) < kChi2Df1);
  // top_p: probabilities [0.5, 0.3, 0.15, 0.05] (as logs); the mass before tokens 0, 1, 2, 3
  // is 0, 0.5, 0.8, 0.95, so top_p = 0.7 keeps tokens 0 and 1 in the ratio 5 : 3.
  Tensor nucleus =
      expand(unsqueeze(log(from_vector<float>({0.5f, 0.3f, 0.15f, 0.05f}, {4})), 0), {20000, 4})
          .contiguous();
  auto kept = longs(sample_next(nucleus, {.temperature = 1, .top_p = 0.7}, &gen));
  BOOST_TEST(chi_square(kept, {0.625, 0.375, 0, 0}) < kChi2Df1);
  // Temperature sharpens: at 0.5 the ratio of tokens 0 and 1 is (5/3)^2.
  auto sharp = longs(sample_next(nucleus, {.temperature = 0.5, .top_p = 0.7}, &gen));
  double r = (5.0 / 3) * (5.0 / 3);
  BOOST_TEST(chi_square(sharp, {r / (1 + r), 1 / (1 + r), 0, 0}) < kChi2Df1);
}

BOOST_AUTO_TEST_CASE(bad_weights_and_options_are_errors_naming_the_op) {
  Tensor negative = from_vector<float>({0.5f, -0.1f}, {2});
  KILN_CHECK_THROWS(multinomial(negative, 1, true), Error,
                    "multinomial: probabilities must be finite and non-negative, got -0.1");
  Tensor empty_row = from_vector<float>({1, 1, 0, 0}, {2, 2});
  KILN_CHECK_THROWS(multinomial(empty_row, 1, true), Error,
                    "multinomial: a row of probabilities sums to 0 (shape [2, 2])");
  Tensor one_positive = from_vector<float>({1, 0, 0}, {3});
  KILN_CHECK_THROWS(multinomial(one_positive, 2, false), Error,
                    "2 samples without replacement, but a row has only 1 positive");
  KILN_CHECK_THROWS(multinomial(one_positive, 4, false), Error,
                    "4 samples without replacement from 3 categories");
  KILN_CHECK_THROWS(multinomial(from_vector<std::int64_t>({1, 2}, {2}), 1), DTypeError,
                    "multinomial: probabilities must be floating, got i64");
  KILN_CHECK_THROWS(multinomial(zeros({2, 2, 2}), 1), ShapeError, "shape [2, 2, 2]");
  KILN_CHECK_THROWS(sample_next(one_positive, {.top_p = 0}), Error,
                    "sample_next: top_p must be in (0, 1], got 0");
  KILN_CHECK_THROWS(sample_next(one_positive, {.temperature = -1}), Error,
                    "sample_next: temperature must be finite and >= 0, got -1");
}

BOOST_AUTO_TEST_SUITE_END()
