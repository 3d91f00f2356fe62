// Composite ops against hand loops: softmax and log_softmax (rows sum to one, stable for large
// inputs), layer_norm and rms_norm with and without affine parameters, cross_entropy (mean, sum,
// none, ignore_index, the [C] with [] case), mse_loss, and seeded dropout.
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "support/reference.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// Softmax of each group of `n` consecutive values.
std::vector<double> host_softmax(const std::vector<double>& v, std::size_t n, bool log_space) {
  std::vector<double> out;
  for (std::size_t r = 0; r < v.size(); r += n) {
    double m = -INFINITY, s = 0;
    for (std::size_t i = 0; i < n; ++i) m = std::max(m, v[r + i]);
    for (std::size_t i = 0; i < n; ++i) s += std::exp(v[r + i] - m);
    for (std::size_t i = 0; i < n; ++i)
      out.push_back(log_space ? v[r + i] - m - std::log(s) : std::exp(v[r + i] - m) / s);
  }
  return out;
}

// Layer norm of each group of `n` consecutive values, with optional per-position affine params.
std::vector<double> host_layer_norm(const std::vector<double>& v, std::size_t n, double eps,
                                    const std::vector<double>& w, const std::vector<double>& b,
                                    bool rms) {
  std::vector<double> out;
  for (std::size_t r = 0; r < v.size(); r += n) {
    double mean = 0, sq = 0;
    for (std::size_t i = 0; i < n; ++i) mean += v[r + i] / n;
    if (rms) mean = 0;
    for (std::size_t i = 0; i < n; ++i) sq += (v[r + i] - mean) * (v[r + i] - mean) / n;
    for (std::size_t i = 0; i < n; ++i) {
      double y = (v[r + i] - mean) / std::sqrt(sq + eps);
      if (!w.empty()) y *= w[i];
      if (!b.empty()) y += b[i];
      out.push_back(y);
    }
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_composite)

BOOST_AUTO_TEST_CASE(softmax_and_log_softmax_match_hand_loops_along_any_dim) {
  auto v = host_random(24, -4, 4, 31);
  Tensor x = f64s(v, {2, 3, 4});
  check_close(softmax(x, -1), {2, 3, 4}, host_softmax(v, 4, false), 1e-14, 1e-16);
  check_close(log_softmax(x, 2), {2, 3, 4}, host_softmax(v, 4, true), 1e-14, 1e-15);
  // Along dim 1: softmax of the transposed data, compared in the transposed layout.
  Tensor xt = x.transpose(1, 2);  // [2, 4, 3]
  auto vt = xt.to_vector<double>();
  check_close(softmax(x, 1).transpose(1, 2), {2, 4, 3}, host_softmax(vt, 3, false), 1e-14, 1e-16);
  check_close(log_softmax(xt, -1), {2, 4, 3}, host_softmax(vt, 3, true), 1e-14, 1e-15);
  // Rows sum to one.
  check_close(sum(softmax(x, 0), {0}), {3, 4}, std::vector<double>(12, 1.0), 1e-14, 0);
  auto vf = as_f32(v);
  Tensor xf = typed(DType::f32, vf, {6, 4});
  check_close(softmax(xf, 1), {6, 4}, host_softmax(vf, 4, false), 1e-6, 1e-7);
  check_close(sum(softmax(xf, 1), {1}), {6}, std::vector<double>(6, 1.0), 1e-6, 0);
}

BOOST_AUTO_TEST_CASE(softmax_is_stable_for_large_inputs_and_handles_minus_infinity) {
  std::vector<double> v = {1000, 1001, 1002, -1000, -1001, -1002};
  Tensor x = typed(DType::f32, v, {2, 3});
  check_close(softmax(x, 1), {2, 3}, host_softmax(v, 3, false), 1e-6, 1e-7);
  check_close(log_softmax(x, 1), {2, 3}, host_softmax(v, 3, true), 1e-6, 1e-5);
  Tensor m = f32s({-INFINITY, 0, 0});
  check_close(softmax(m, 0), {3}, {0, 0.5, 0.5}, 1e-7, 0);
  check_values(log_softmax(m, 0).to(DType::f64).slice(0, 0, 1), {1}, {-INFINITY});
  // Integer input computes in f32.
  Tensor i = softmax(i64s({0, 0}), 0);
  check_values(i, {2}, DType::f32, {0.5, 0.5});
  // Half input stays half.
  Tensor h = softmax(typed(DType::f16, {1, 2, 3}, {3}), 0);
  BOOST_TEST(h.dtype() == DType::f16);
  check_close(h, {3}, host_softmax({1, 2, 3}, 3, false), 2e-3, 1e-4);
}

BOOST_AUTO_TEST_CASE(layer_norm_with_and_without_weight_and_bias) {
  auto v = host_random(24, -3, 5, 41);
  Tensor x = f64s(v, {2, 3, 4});
  std::vector<double> w = {0.5, 1, 2, -1}, b = {0, 0.1, -0.2, 3};
  check_close(layer_norm(x, {4}), {2, 3, 4}, host_layer_norm(v, 4, 1e-5, {}, {}, false), 1e-12,
              1e-12);
  check_close(layer_norm(x, {4}, f64s(w)), {2, 3, 4}, host_layer_norm(v, 4, 1e-5, w, {}, false),
              1e-12, 1e-12);
  check_close(layer_norm(x, {4}, f64s(w), f64s(b), 1e-3), {2, 3, 4},
              host_layer_norm(v, 4, 1e-3, w, b, false), 1e-12, 1e-12);
  check_close(layer_norm(x, {4}, Tensor(), f64s(b)), {2, 3, 4},
              host_layer_norm(v, 4, 1e-5, {}, b, false), 1e-12, 1e-12);
  // Over the last two dims.
  check_close(layer_norm(x, {3, 4}), {2, 3, 4}, host_layer_norm(v, 12, 1e-5, {}, {}, false), 1e-12,
              1e-12);
  // f32, and each normalized row has mean 0 and (biased) variance ~1.
  Tensor y = layer_norm(typed(DType::f32, v, {6, 4}), {4});
  BOOST_TEST(y.dtype() == DType::f32);
  check_close(mean(y, {1}), {6}, std::vector<double>(6, 0), 0, 1e-6);
  check_close(var(y, {1}, 0), {6}, std::vector<double>(6, 1), 1e-3, 0);
}

BOOST_AUTO_TEST_CASE(rms_norm_with_and_without_weight) {
  auto v = host_random(12, -3, 5, 43);
  Tensor x = f64s(v, {3, 4});
  std::vector<double> w = {1, 0.5, -2, 3};
  check_close(rms_norm(x, {4}), {3, 4}, host_layer_norm(v, 4, 1e-6, {}, {}, true), 1e-12, 1e-12);
  check_close(rms_norm(x, {4}, f64s(w), 1e-2), {3, 4}, host_layer_norm(v, 4, 1e-2, w, {}, true),
              1e-12, 1e-12);
  check_close(rms_norm(x, {3, 4}), {3, 4}, host_layer_norm(v, 12, 1e-6, {}, {}, true), 1e-12,
              1e-12);
  // Hand value: [3, 4] has rms sqrt(12.5).
  check_close(rms_norm(f32s({3, 4}), {2}, Tensor(), 0), {2},
              {3 / std::sqrt(12.5), 4 / std::sqrt(12.5)}, 1e-6, 0);
}

BOOST_AUTO_TEST_CASE(cross_entropy_is_mean_negative_log_softmax_of_the_target) {
  auto v = host_random(20, -3, 3, 51);
  auto lsm = host_softmax(v, 5, true);
  std::vector<std::int64_t> t = {1, 0, 4, 2};
  std::vector<double> nll;
  for (int i = 0; i < 4; ++i) nll.push_back(-lsm[i * 5 + t[i]]);
  double total = nll[0] + nll[1] + nll[2] + nll[3];
  Tensor logits = f64s(v, {4, 5});
  check_close(cross_entropy(logits, i64s(t)), {}, {total / 4}, 1e-13, 0);
  check_close(cross_entropy(logits, i64s(t), -100, Reduction::sum), {}, {total}, 1e-13, 0);
  check_close(cross_entropy(logits, i64s(t), -100, Reduction::none), {4}, nll, 1e-13, 0);
  std::vector<std::int32_t> t32 = {1, 0, 4, 2};
  check_close(cross_entropy(logits, from_vector(t32)), {}, {total / 4}, 1e-13, 0);
  // Hand value: uniform logits over 4 classes give log(4).
  check_close(cross_entropy(zeros({2, 4}), i64s({3, 0})), {}, {std::log(4.0)}, 1e-6, 0);
}

BOOST_AUTO_TEST_CASE(cross_entropy_ignores_targets_equal_to_ignore_index) {
  auto v = host_random(20, -3, 3, 52);
  auto lsm = host_softmax(v, 5, true);
  Tensor logits = f64s(v, {4, 5});
  // Default ignore_index -100: the mean is over the three counted rows.
  Tensor t = i64s({1, -100, 4, 2});
  double counted = -lsm[0 * 5 + 1] - lsm[2 * 5 + 4] - lsm[3 * 5 + 2];
  check_close(cross_entropy(logits, t), {}, {counted / 3}, 1e-13, 0);
  check_close(cross_entropy(logits, t, -100, Reduction::sum), {}, {counted}, 1e-13, 0);
  check_close(cross_entropy(logits, t, -100, Reduction::none), {4},
              {-lsm[1], 0, -lsm[14], -lsm[17]}, 1e-13, 0);
  // A custom ignore_index that is a valid class.
  Tensor t2 = i64s({1, 0, 4, 0});
  double counted2 = -lsm[1] - lsm[14];
  check_close(cross_entropy(logits, t2, 0), {}, {counted2 / 2}, 1e-13, 0);
}

BOOST_AUTO_TEST_CASE(cross_entropy_of_a_single_sample_with_a_scalar_target) {
  std::vector<double> v = {0.5, -1, 2};
  auto lsm = host_softmax(v, 3, true);
  Tensor l = cross_entropy(f64s(v), i64s({2}, {}));
  check_close(l, {}, {-lsm[2]}, 1e-14, 0);
  check_close(cross_entropy(f64s(v), i64s({0}, {}), -100, Reduction::none), {}, {-lsm[0]}, 1e-14,
              0);
}

BOOST_AUTO_TEST_CASE(mse_loss_reduces_squared_differences) {
  Tensor a = f32s({1, 2, 3, 4}, {2, 2}), b = f32s({0, 2, 5, 1}, {2, 2});
  check_values(mse_loss(a, b), {}, {(1 + 0 + 4 + 9) / 4.0});
  check_values(mse_loss(a, b, Reduction::sum), {}, {14});
  check_values(mse_loss(a, b, Reduction::none), {2, 2}, {1, 0, 4, 9});
  check_values(mse_loss(a.t(), b.t(), Reduction::none), {2, 2}, {1, 4, 0, 9});
}

BOOST_AUTO_TEST_CASE(dropout_zeroes_about_p_and_scales_survivors) {
  const int n = 20000;
  Tensor x = full({n}, 2.0);
  Generator g1(123);
  Tensor y = dropout(x, 0.3, true, &g1);
  auto v = y.to_vector<float>();
  const float scaled = 2.0f * static_cast<float>(1.0 / 0.7);
  int zeros_count = 0;
  for (float e : v) {
    if (e == 0)
      ++zeros_count;
    else
      BOOST_REQUIRE_CLOSE(e, scaled, 1e-4);
  }
  BOOST_TEST(std::abs(zeros_count / double(n) - 0.3) < 0.02);
  // Expectation is preserved.
  BOOST_TEST(std::abs(mean(y).item() - 2.0) < 0.05);
  // Same seed, same mask; a different seed gives a different mask.
  Generator g2(123), g3(124);
  auto again = dropout(x, 0.3, true, &g2).to_vector<float>();
  BOOST_TEST(again == v, boost::test_tools::per_element());
  auto other = dropout(x, 0.3, true, &g3).to_vector<float>();
  BOOST_TEST(other != v);
}

BOOST_AUTO_TEST_CASE(dropout_is_the_identity_for_p_zero_and_in_eval_mode) {
  Tensor x = f32s({1, -2, 3});
  check_values(dropout(x, 0.0), {3}, {1, -2, 3});
  check_values(dropout(x, 0.9, /*training=*/false), {3}, {1, -2, 3});
  check_values(dropout(x, 1.0), {3}, {0, -0.0, 0});
  Generator g(1);
  Tensor h = dropout(typed(DType::bf16, std::vector<double>(64, 1), {8, 8}), 0.5, true, &g);
  BOOST_TEST(h.dtype() == DType::bf16);
  for (double e : h.to_vector<double>()) BOOST_TEST((e == 0 || e == 2));
}

BOOST_AUTO_TEST_SUITE_END()
