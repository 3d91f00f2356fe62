// Modules (Linear, LayerNorm, Embedding) and optimizers (SGD, AdamW) against plain C++
// re-computations of the same formulas.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>

#include "autograd/nn.h"
#include "autograd/optim.h"

using namespace kiln;

BOOST_AUTO_TEST_SUITE(nn_modules)

BOOST_AUTO_TEST_CASE(linear_computes_x_times_weight_transposed_plus_bias) {
  Generator gen(3);
  nn::Linear fc(3, 2, true, DType::f64, &gen);
  Tensor x = from_vector(std::vector<double>{1, 2, 3, -1, 0, 4}, {2, 3});
  auto w = fc.weight.to_vector<double>();
  auto b = fc.bias.to_vector<double>();
  auto y = fc(x).to_vector<double>();
  double xs[2][3] = {{1, 2, 3}, {-1, 0, 4}};
  for (int i = 0; i < 2; ++i)
    for (int o = 0; o < 2; ++o) {
      double expected = b[o];
      for (int k = 0; k < 3; ++k) expected += xs[i][k] * w[o * 3 + k];
      BOOST_TEST(y[i * 2 + o] == expected, boost::test_tools::tolerance(1e-12));
    }
}

BOOST_AUTO_TEST_CASE(linear_init_is_bounded_by_inverse_sqrt_fan_in_and_seeded) {
  Generator a(11), b(11);
  nn::Linear l1(16, 8, true, DType::f32, &a), l2(16, 8, true, DType::f32, &b);
  // Uniform on [-1/sqrt(16), 1/sqrt(16)]: within the bound, and filling it (all-zero or tiny
  // weights fail): 128 draws have a standard deviation near 0.25 / sqrt(3) = 0.144 and reach
  // past 0.2 on both sides (each side misses with probability 0.9^64).
  auto w = l1.weight.to_vector<float>();
  double sq = 0, lowest = 0, highest = 0;
  for (float v : w) {
    BOOST_TEST(std::abs(v) <= 0.25f);
    sq += double(v) * v;
    lowest = std::min<double>(lowest, v), highest = std::max<double>(highest, v);
  }
  double rms = std::sqrt(sq / w.size());
  BOOST_TEST((rms > 0.11 && rms < 0.18), "rms " << rms);
  BOOST_TEST(lowest < -0.2);
  BOOST_TEST(highest > 0.2);
  for (float v : l1.bias.to_vector<float>()) BOOST_TEST(std::abs(v) <= 0.25f);
  BOOST_TEST(l1.weight.to_vector<float>() == l2.weight.to_vector<float>());
  Generator c(12);
  nn::Linear l3(16, 8, true, DType::f32, &c);
  BOOST_TEST(l3.weight.to_vector<float>() != w);  // another seed, other weights
  BOOST_TEST(l1.parameters().size() == 2u);
  BOOST_TEST(l1.named_parameters()[1].first == "bias");
  BOOST_TEST(l1.weight.requires_grad());
  nn::Linear no_bias(4, 2, false);
  BOOST_TEST(!no_bias.bias.defined());
  BOOST_TEST(no_bias.parameters().size() == 1u);
}

BOOST_AUTO_TEST_CASE(layer_norm_module_starts_as_plain_normalization) {
  nn::LayerNorm ln({4}, 1e-5, true, DType::f64);
  Tensor x = from_vector(std::vector<double>{1, 2, 3, 4}, {1, 4});
  auto y = ln(x).to_vector<double>();
  double mu = 2.5, var = 1.25;  // population variance of 1..4
  for (int i = 0; i < 4; ++i)
    BOOST_TEST(y[i] == (i + 1 - mu) / std::sqrt(var + 1e-5), boost::test_tools::tolerance(1e-12));
  BOOST_TEST(ln.parameters().size() == 2u);
}

BOOST_AUTO_TEST_CASE(embedding_module_looks_up_rows) {
  Generator gen(5);
  nn::Embedding emb(5, 3, DType::f32, &gen);
  auto w = emb.weight.to_vector<float>();
  Tensor idx = from_vector(std::vector<std::int64_t>{4, 0, 4}, {3});
  auto y = emb(idx).to_vector<float>();
  BOOST_TEST(emb(idx).shape() == (Shape{3, 3}));
  for (int j = 0; j < 3; ++j) {
    BOOST_TEST(y[j] == w[12 + j]);
    BOOST_TEST(y[3 + j] == w[j]);
    BOOST_TEST(y[6 + j] == w[12 + j]);
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(optimizers)

namespace {
// A leaf p with a fixed gradient g, as an optimizer sees it after backward.
Tensor param_with_grad(std::vector<double> p, std::vector<double> g) {
  Tensor t = from_vector(p);
  t.requires_grad_();
  t.set_grad(from_vector(g));
  return t;
}
}  // namespace

BOOST_AUTO_TEST_CASE(sgd_plain_step) {
  Tensor p = param_with_grad({1.0, -2.0}, {0.5, 0.25});
  optim::SGD opt({p}, 0.1);
  opt.step();
  auto v = p.to_vector<double>();
  BOOST_TEST(v[0] == 0.95, boost::test_tools::tolerance(1e-15));
  BOOST_TEST(v[1] == -2.025, boost::test_tools::tolerance(1e-15));
}

BOOST_AUTO_TEST_CASE(sgd_momentum_nesterov_and_weight_decay_match_torch_formulas) {
  for (bool nesterov : {false, true}) {
    Tensor p = param_with_grad({1.0}, {0.5});
    optim::SGD opt({p}, 0.1, 0.9, 0.01, nesterov);
    double ref = 1.0, buf = 0.0;
    for (int step = 0; step < 4; ++step) {
      double g = 0.5 + 0.01 * ref;
      buf = step == 0 ? g : 0.9 * buf + g;
      ref -= 0.1 * (nesterov ? g + 0.9 * buf : buf);
      p.set_grad(from_vector(std::vector<double>{0.5}));
      opt.step();
      BOOST_TEST(p.item() == ref, boost::test_tools::tolerance(1e-12));
    }
  }
}

BOOST_AUTO_TEST_CASE(adamw_matches_a_scalar_reimplementation_over_steps) {
  Tensor p = param_with_grad({1.0, -0.5}, {0.0, 0.0});
  optim::AdamW opt({p}, 0.1, 0.9, 0.999, 1e-8, 0.01);
  double ref[2] = {1.0, -0.5}, m[2] = {0, 0}, v[2] = {0, 0};
  for (int t = 1; t <= 5; ++t) {
    double g[2] = {0.3 * t, -0.2};
    p.set_grad(from_vector(std::vector<double>{g[0], g[1]}));
    opt.step();
    for (int i = 0; i < 2; ++i) {
      ref[i] *= 1 - 0.1 * 0.01;
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
      double mhat = m[i] / (1 - std::pow(0.9, t)), vhat = v[i] / (1 - std::pow(0.999, t));
      ref[i] -= 0.1 * mhat / (std::sqrt(vhat) + 1e-8);
    }
    auto got = p.to_vector<double>();
    BOOST_TEST(got[0] == ref[0], boost::test_tools::tolerance(1e-9));
    BOOST_TEST(got[1] == ref[1], boost::test_tools::tolerance(1e-9));
  }
  BOOST_TEST(opt.steps() == 5);
}

BOOST_AUTO_TEST_CASE(zero_grad_clears_and_parameters_without_grad_are_skipped) {
  Tensor p = param_with_grad({1.0}, {1.0});
  Tensor q = from_vector(std::vector<double>{2.0});
  q.requires_grad_();
  optim::SGD opt({p, q}, 0.5);
  opt.step();
  BOOST_TEST(q.item() == 2.0);  // no gradient: untouched
  BOOST_TEST(p.item() == 0.5);
  opt.zero_grad();
  BOOST_TEST(!p.grad().defined());
}

BOOST_AUTO_TEST_CASE(training_a_linear_regression_converges) {
  // y = 3x - 1 with noise-free data: SGD must recover the coefficients.
  Generator gen(1);
  nn::Linear fc(1, 1, true, DType::f64, &gen);
  optim::SGD opt(fc.parameters(), 0.1, 0.9);
  Tensor x = linspace(-1, 1, 32, DType::f64).reshape({32, 1});
  Tensor y = x * 3.0 - 1.0;
  for (int i = 0; i < 300; ++i) {
    Tensor loss = mse_loss(fc(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  BOOST_TEST(fc.weight.item() == 3.0, boost::test_tools::tolerance(1e-5));
  BOOST_TEST(fc.bias.item() == -1.0, boost::test_tools::tolerance(1e-5));
}

BOOST_AUTO_TEST_CASE(optimizer_rejects_parameters_that_do_not_require_grad) {
  BOOST_CHECK_EXCEPTION(optim::SGD({zeros({2, 3})}, 0.1), AutogradError, [](const Error& e) {
    return std::string(e.what()).find("[2, 3]") != std::string::npos;
  });
  Tensor p = zeros({1});
  p.requires_grad_();
  BOOST_CHECK_THROW(optim::AdamW({p}, 0.1, 1.5), Error);
}

BOOST_AUTO_TEST_SUITE_END()
