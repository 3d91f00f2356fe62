// Optimizer conveniences: lr get/set, StepLR and CosineWithWarmup against closed forms written
// here, clip_grad_norm_ / clip_grad_value_ against hand-computed norms, optimizer and scheduler
// state dicts (values, errors, a safetensors round trip that resumes training bit for bit).
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <numbers>

#include "autograd/lr_scheduler.h"
#include "autograd/nn.h"
#include "autograd/optim.h"
#include "autograd/safetensors.h"
#include "runtime/grad_mode.h"
#include "support/reference.h"

using namespace kiln;
namespace tt = boost::test_tools;

namespace {

// A leaf p with a fixed gradient g, as an optimizer sees it after backward.
Tensor param_with_grad(std::vector<double> p, std::vector<double> g) {
  Tensor t = from_vector(p);
  t.requires_grad_();
  t.set_grad(from_vector(g));
  return t;
}

Tensor f32_param_with_grad(std::vector<float> p, std::vector<float> g) {
  Tensor t = from_vector(p);
  t.requires_grad_();
  t.set_grad(from_vector(g));
  return t;
}

// A directory under the system temp dir, removed with its files at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           fmt::format("kiln_test_optim_{}_{}", getpid(), counter()++);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(learning_rate)

BOOST_AUTO_TEST_CASE(set_lr_changes_the_step_and_rejects_bad_values) {
  Tensor p = param_with_grad({1.0, -2.0}, {0.5, 0.25});
  optim::SGD opt({p}, 0.1);
  BOOST_TEST(opt.lr() == 0.1);
  opt.set_lr(0.5);
  BOOST_TEST(opt.lr() == 0.5);
  opt.step();
  auto v = p.to_vector<double>();
  BOOST_TEST(v[0] == 1.0 - 0.5 * 0.5);
  BOOST_TEST(v[1] == -2.0 - 0.5 * 0.25);
  KILN_CHECK_THROWS(opt.set_lr(-1.0), Error, "SGD", "-1");
  KILN_CHECK_THROWS(opt.set_lr(std::nan("")), Error, "SGD", "nan");
  BOOST_TEST(opt.lr() == 0.5);  // unchanged by the rejected values
  optim::AdamW adam({p}, 1e-3);
  KILN_CHECK_THROWS(adam.set_lr(-0.25), Error, "AdamW", "-0.25");
  KILN_CHECK_THROWS(optim::SGD({p}, -0.1), Error, "SGD", "-0.1");
}

BOOST_AUTO_TEST_CASE(adamw_follows_an_lr_changed_between_steps) {
  Tensor p = param_with_grad({1.0, -0.5}, {0.0, 0.0});
  optim::AdamW opt({p}, 0.1, 0.9, 0.999, 1e-8, 0.01);
  double ref[2] = {1.0, -0.5}, m[2] = {0, 0}, v[2] = {0, 0};
  const double lrs[4] = {0.1, 0.05, 0.2, 0.0};
  for (int t = 1; t <= 4; ++t) {
    double lr = lrs[t - 1];
    opt.set_lr(lr);
    double g[2] = {0.3 * t, -0.2};
    p.set_grad(from_vector(std::vector<double>{g[0], g[1]}));
    opt.step();
    for (int i = 0; i < 2; ++i) {
      ref[i] *= 1 - lr * 0.01;
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
      double mhat = m[i] / (1 - std::pow(0.9, t)), vhat = v[i] / (1 - std::pow(0.999, t));
      ref[i] -= lr * mhat / (std::sqrt(vhat) + 1e-8);
    }
    auto got = p.to_vector<double>();
    BOOST_TEST(got[0] == ref[0], tt::tolerance(1e-12));
    BOOST_TEST(got[1] == ref[1], tt::tolerance(1e-12));
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(schedulers)

BOOST_AUTO_TEST_CASE(step_lr_decays_by_gamma_every_step_size_epochs) {
  Tensor p = param_with_grad({0.0}, {1.0});
  optim::SGD opt({p}, 0.5);
  optim::StepLR sched(opt, 3, 0.1);
  // Epochs 0..9: 0.5 for 0-2, 0.05 for 3-5, 0.005 for 6-8, 0.0005 at 9.
  const double want[10] = {0.5, 0.5, 0.5, 0.05, 0.05, 0.05, 0.005, 0.005, 0.005, 0.0005};
  double param = 0.0;
  for (int epoch = 0; epoch < 10; ++epoch) {
    BOOST_TEST(sched.last_epoch() == epoch);
    BOOST_TEST(sched.last_lr() == want[epoch], tt::tolerance(1e-14));
    BOOST_TEST(opt.lr() == sched.last_lr());
    // The optimizer steps with the scheduled lr: p -= lr * 1.
    opt.step();
    param -= sched.last_lr();
    BOOST_TEST(p.item() == param, tt::tolerance(1e-14));
    sched.step();
  }
  BOOST_TEST(sched.base_lr() == 0.5);
}

BOOST_AUTO_TEST_CASE(cosine_with_warmup_matches_the_closed_form) {
  // HuggingFace's get_cosine_schedule_with_warmup (num_cycles 0.5), written out here.
  auto hf = [](double base, int warmup, int total, int step) {
    if (step < warmup) return base * step / std::max(1, warmup);
    double progress = double(step - warmup) / std::max(1, total - warmup);
    return base * std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
  };
  Tensor p = param_with_grad({0.0}, {1.0});
  optim::AdamW opt({p}, 2.0);
  optim::CosineWithWarmup sched(opt, 4, 12);
  // Hand values: 0 at the start, half-way up the warmup, the peak, half-way down, the end.
  BOOST_TEST(sched.last_lr() == 0.0);
  BOOST_TEST(opt.lr() == 0.0);
  for (int step = 1; step <= 12; ++step) {
    sched.step();
    BOOST_TEST(sched.last_lr() == hf(2.0, 4, 12, step), tt::tolerance(1e-14));
    BOOST_TEST(opt.lr() == sched.last_lr());
    if (step == 2) BOOST_TEST(sched.last_lr() == 1.0, tt::tolerance(1e-15));
    if (step == 4) BOOST_TEST(sched.last_lr() == 2.0, tt::tolerance(1e-15));
    if (step == 8) BOOST_TEST(sched.last_lr() == 1.0, tt::tolerance(1e-15));
    if (step == 12) BOOST_TEST(std::abs(sched.last_lr()) < 1e-15);
  }
  // Past total_steps the lr stays at min_lr (0) instead of rising with the cosine.
  for (int step = 13; step <= 20; ++step) {
    sched.step();
    BOOST_TEST(std::abs(sched.last_lr()) < 1e-15);
  }
}

BOOST_AUTO_TEST_CASE(cosine_with_min_lr_and_without_warmup) {
  Tensor p = param_with_grad({0.0}, {1.0});
  optim::SGD opt({p}, 2.0);
  optim::CosineWithWarmup sched(opt, 4, 12, 0.5);
  const double want_at[] = {0.0, 0.5, 1.0, 1.5, 2.0};  // linear warmup from 0, min_lr aside
  for (int step = 0; step <= 4; ++step) {
    BOOST_TEST(sched.last_lr() == want_at[step], tt::tolerance(1e-15));
    sched.step();
  }
  for (int step = 5; step <= 16; ++step) {
    double progress = std::min(1.0, (step - 4) / 8.0);
    double want = 0.5 + 1.5 * 0.5 * (1 + std::cos(std::numbers::pi * progress));
    BOOST_TEST(sched.last_lr() == want, tt::tolerance(1e-14));
    if (step == 8) BOOST_TEST(sched.last_lr() == 1.25, tt::tolerance(1e-15));
    if (step >= 12) BOOST_TEST(sched.last_lr() == 0.5, tt::tolerance(1e-15));
    sched.step();
  }
  // No warmup: the first lr is the base lr.
  optim::SGD opt2({p}, 0.3);
  optim::CosineWithWarmup no_warmup(opt2, 0, 10);
  BOOST_TEST(no_warmup.last_lr() == 0.3);
  BOOST_TEST(opt2.lr() == 0.3);
  no_warmup.step();
  BOOST_TEST(no_warmup.last_lr() == 0.3 * 0.5 * (1 + std::cos(std::numbers::pi / 10)),
             tt::tolerance(1e-14));
}

BOOST_AUTO_TEST_CASE(schedulers_reject_bad_arguments) {
  Tensor p = param_with_grad({0.0}, {1.0});
  optim::SGD opt({p}, 0.1);
  KILN_CHECK_THROWS(optim::StepLR(opt, 0, 0.1), Error, "StepLR", "step_size", "0");
  KILN_CHECK_THROWS(optim::StepLR(opt, -2, 0.1), Error, "StepLR", "-2");
  KILN_CHECK_THROWS(optim::StepLR(opt, 2, -0.5), Error, "StepLR", "gamma", "-0.5");
  KILN_CHECK_THROWS(optim::CosineWithWarmup(opt, 10, 5), Error, "CosineWithWarmup", "total_steps",
                    "10", "5");
  KILN_CHECK_THROWS(optim::CosineWithWarmup(opt, -1, 5), Error, "CosineWithWarmup", "warmup_steps",
                    "-1");
  KILN_CHECK_THROWS(optim::CosineWithWarmup(opt, 0, 0), Error, "CosineWithWarmup", "0");
  KILN_CHECK_THROWS(optim::CosineWithWarmup(opt, 1, 5, -0.01), Error, "CosineWithWarmup", "min_lr",
                    "-0.01");
  KILN_CHECK_THROWS(optim::CosineWithWarmup(opt, 1, 5, 0.2), Error, "CosineWithWarmup", "min_lr",
                    "0.2", "0.1");
  BOOST_TEST(opt.lr() == 0.1);  // the rejected schedulers set nothing
}

BOOST_AUTO_TEST_CASE(scheduler_state_dict_resumes_the_schedule) {
  Tensor p = param_with_grad({0.0}, {1.0});
  optim::SGD opt({p}, 1.0);
  optim::CosineWithWarmup sched(opt, 3, 10, 0.1);
  for (int i = 0; i < 5; ++i) sched.step();
  nn::StateDict state = sched.state_dict();
  BOOST_TEST(state.size() == 6u);
  BOOST_TEST(state[0].first == "last_epoch");
  BOOST_TEST(state[0].second.item<std::int64_t>() == 5);

  // A fresh optimizer and a scheduler built with other arguments take the saved ones.
  optim::SGD opt2({p}, 7.0);
  optim::CosineWithWarmup sched2(opt2, 1, 2);
  sched2.load_state_dict(state);
  BOOST_TEST(sched2.last_epoch() == 5);
  BOOST_TEST(sched2.base_lr() == 1.0);
  BOOST_TEST(opt2.lr() == sched.last_lr());
  for (int i = 0; i < 8; ++i) {
    sched.step();
    sched2.step();
    BOOST_TEST(sched2.last_lr() == sched.last_lr());  // bitwise
    BOOST_TEST(opt2.lr() == opt.lr());
  }

  // The wrong scheduler's state, and invalid values, are errors that change nothing.
  optim::StepLR step_lr(opt2, 2, 0.5);
  KILN_CHECK_THROWS(step_lr.load_state_dict(state), Error, "StepLR.load_state_dict", "step_size");
  nn::StateDict bad = step_lr.state_dict();
  bad[3].second = scalar_tensor(std::int64_t{0}, DType::i64);  // step_size
  KILN_CHECK_THROWS(step_lr.load_state_dict(bad), Error, "StepLR", "step_size", "0");
  bad = step_lr.state_dict();
  bad.emplace_back("extra", zeros({2}));
  KILN_CHECK_THROWS(step_lr.load_state_dict(bad), Error, "StepLR.load_state_dict", "extra");
  BOOST_TEST(step_lr.last_epoch() == 0);
  BOOST_TEST(step_lr.last_lr() == opt2.lr());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(gradient_clipping)

BOOST_AUTO_TEST_CASE(clip_grad_norm_scales_every_gradient_by_the_global_2_norm) {
  // Norms: ||(3, 4)|| = 5, ||(12)|| = 12, global sqrt(25 + 144) = 13; `c` has no gradient.
  Tensor a = param_with_grad({1.0, 1.0}, {3.0, 4.0});
  Tensor b = f32_param_with_grad({1.0f}, {12.0f});
  Tensor c = from_vector(std::vector<double>{5.0});
  c.requires_grad_();
  Tensor a_grad = a.grad();
  double total = optim::clip_grad_norm_({a, b, c}, 6.5);
  BOOST_TEST(total == 13.0);
  double coef = 6.5 / (13.0 + 1e-6);
  auto ga = a.grad().to_vector<double>();
  BOOST_TEST(ga[0] == 3.0 * coef);
  BOOST_TEST(ga[1] == 4.0 * coef);
  BOOST_TEST(b.grad().item<float>() == 12.0f * static_cast<float>(coef));  // scaled in f32
  BOOST_TEST(!c.grad().defined());
  // In place: the handle taken before sees the scaled values; no history was recorded.
  BOOST_TEST(a_grad.to_vector<double>() == ga);
  BOOST_TEST(!a.grad().requires_grad());
  BOOST_TEST(!a.grad().grad_fn());
  BOOST_TEST(grad_enabled());

  // Under the limit: untouched, bit for bit.
  double again = optim::clip_grad_norm_({a, b, c}, 100.0);
  BOOST_TEST(again == std::sqrt(25 * coef * coef + 144 * coef * coef), tt::tolerance(1e-6));
  BOOST_TEST(a.grad().to_vector<double>() == ga);
}

BOOST_AUTO_TEST_CASE(clip_grad_norm_inf_and_p_norms) {
  Tensor a = param_with_grad({0.0, 0.0}, {-7.0, 2.0});
  Tensor b = param_with_grad({0.0}, {3.0});
  double total = optim::clip_grad_norm_({a, b}, 3.5, std::numeric_limits<double>::infinity());
  BOOST_TEST(total == 7.0);
  double coef = 3.5 / (7.0 + 1e-6);
  BOOST_TEST(a.grad().to_vector<double>() == (std::vector<double>{-7.0 * coef, 2.0 * coef}));
  BOOST_TEST(b.grad().item() == 3.0 * coef);

  // p = 3 and p = 1 over two parameters, against sums written here.
  Tensor x = param_with_grad({0.0, 0.0}, {1.0, -2.0});
  Tensor y = param_with_grad({0.0}, {0.5});
  double p3 = std::cbrt(1.0 + 8.0 + 0.125);
  BOOST_TEST(optim::clip_grad_norm_({x, y}, 10.0, 3.0) == p3, tt::tolerance(1e-14));
  BOOST_TEST(optim::clip_grad_norm_({x, y}, 1.75, 1.0) == 3.5);
  BOOST_TEST(x.grad().to_vector<double>() ==
             (std::vector<double>{1.0 * (1.75 / (3.5 + 1e-6)), -2.0 * (1.75 / (3.5 + 1e-6))}));

  // Nothing to clip: norm 0.
  Tensor z = from_vector(std::vector<double>{1.0});
  z.requires_grad_();
  BOOST_TEST(optim::clip_grad_norm_({z}, 1.0) == 0.0);
}

BOOST_AUTO_TEST_CASE(clip_grad_norm_after_backward_under_no_grad) {
  Tensor w = from_vector(std::vector<float>{1.0f, 2.0f, 3.0f});
  w.requires_grad_();
  Tensor x = from_vector(std::vector<float>{2.0f, -4.0f, 4.0f});
  (w * x).sum().backward();  // grad = x, norm 6
  NoGradGuard no_grad;
  BOOST_TEST(optim::clip_grad_norm_({w}, 3.0) == 6.0);
  float coef = static_cast<float>(3.0 / (6.0 + 1e-6));
  BOOST_TEST(w.grad().to_vector<float>() ==
             (std::vector<float>{2.0f * coef, -4.0f * coef, 4.0f * coef}));
  BOOST_TEST(!grad_enabled());  // the caller's mode is kept
}

BOOST_AUTO_TEST_CASE(clip_grad_norm_non_finite_total_scales_anyway) {
  // An inf gradient: total inf, coefficient 0: finite entries become 0, the inf one NaN.
  double inf = std::numeric_limits<double>::infinity();
  Tensor a = param_with_grad({0.0, 0.0}, {inf, 2.0});
  Tensor b = param_with_grad({0.0}, {-3.0});
  BOOST_TEST(std::isinf(optim::clip_grad_norm_({a, b}, 1.0)));
  auto ga = a.grad().to_vector<double>();
  BOOST_TEST(std::isnan(ga[0]));
  BOOST_TEST(ga[1] == 0.0);
  BOOST_TEST(b.grad().item() == 0.0);
  // A NaN gradient: total NaN, every gradient NaN.
  Tensor c = param_with_grad({0.0}, {std::nan("")});
  Tensor d = param_with_grad({0.0, 0.0}, {1.0, 2.0});
  BOOST_TEST(std::isnan(optim::clip_grad_norm_({c, d}, 1.0)));
  for (double v : d.grad().to_vector<double>()) BOOST_TEST(std::isnan(v));
  Tensor e = param_with_grad({0.0}, {std::nan("")});
  BOOST_TEST(std::isnan(optim::clip_grad_norm_({e}, 1.0, inf)));
}

BOOST_AUTO_TEST_CASE(clip_grad_value_clamps_in_place) {
  Tensor a = param_with_grad({0.0, 0.0, 0.0}, {-3.0, 0.5, 2.0});
  Tensor b = from_vector(std::vector<double>{1.0});
  b.requires_grad_();
  Tensor handle = a.grad();
  optim::clip_grad_value_({a, b}, 1.0);
  BOOST_TEST(handle.to_vector<double>() == (std::vector<double>{-1.0, 0.5, 1.0}));
  BOOST_TEST(!b.grad().defined());
}

BOOST_AUTO_TEST_CASE(clipping_rejects_bad_arguments) {
  Tensor a = param_with_grad({0.0}, {1.0});
  KILN_CHECK_THROWS(optim::clip_grad_norm_({a}, -1.0), Error, "clip_grad_norm_", "max_norm", "-1");
  KILN_CHECK_THROWS(optim::clip_grad_norm_({a}, 1.0, 0.0), Error, "clip_grad_norm_", "norm_type",
                    "0");
  KILN_CHECK_THROWS(optim::clip_grad_norm_({a}, 1.0, -2.0), Error, "norm_type", "-2");
  KILN_CHECK_THROWS(optim::clip_grad_value_({a}, -0.5), Error, "clip_grad_value_", "-0.5");
  BOOST_TEST(a.grad().item() == 1.0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(optimizer_state)

BOOST_AUTO_TEST_CASE(sgd_state_dict_holds_hyperparameters_and_momentum_buffers) {
  Tensor p = param_with_grad({1.0, 2.0}, {0.5, -1.0});
  Tensor frozen = from_vector(std::vector<double>{3.0});
  frozen.requires_grad_();  // never gets a gradient: no buffer
  optim::SGD opt({p, frozen}, 0.1, 0.9, 0.01, true);
  opt.step();
  p.set_grad(from_vector(std::vector<double>{0.25, 0.0}));
  opt.step();
  // Hand-written: buf1 = g1 + wd p0; buf2 = 0.9 buf1 + g2 + wd p1.
  double p0[2] = {1.0, 2.0}, g1[2] = {0.5, -1.0}, g2[2] = {0.25, 0.0}, buf[2], p1[2];
  for (int i = 0; i < 2; ++i) {
    double d = g1[i] + 0.01 * p0[i];
    buf[i] = d;
    p1[i] = p0[i] - 0.1 * (d + 0.9 * buf[i]);
    d = g2[i] + 0.01 * p1[i];
    buf[i] = 0.9 * buf[i] + d;
  }
  nn::StateDict state = opt.state_dict();
  std::vector<std::string> names;
  for (auto& [name, t] : state) names.push_back(name);
  BOOST_TEST(names == (std::vector<std::string>{"lr", "momentum", "weight_decay", "nesterov",
                                                "num_params", "state.0.momentum_buffer"}));
  BOOST_TEST(state[0].second.item() == 0.1);
  BOOST_TEST(state[1].second.item() == 0.9);
  BOOST_TEST(state[3].second.item() == 1.0);
  BOOST_TEST(state[4].second.item<std::int64_t>() == 2);
  auto b = state[5].second.to_vector<double>();
  BOOST_TEST(b[0] == buf[0], tt::tolerance(1e-14));
  BOOST_TEST(b[1] == buf[1], tt::tolerance(1e-14));
}

BOOST_AUTO_TEST_CASE(adamw_state_dict_holds_moments_and_step) {
  Tensor p = param_with_grad({1.0}, {0.5});
  optim::AdamW opt({p}, 0.01, 0.8, 0.9, 1e-6, 0.0);
  opt.step();
  p.set_grad(from_vector(std::vector<double>{-1.0}));
  opt.step();
  double m = 0.2 * 0.5, v = 0.1 * 0.25;
  m = 0.8 * m + 0.2 * -1.0;
  v = 0.9 * v + 0.1 * 1.0;
  nn::StateDict state = opt.state_dict();
  BOOST_TEST(state.size() == 9u);
  BOOST_TEST(state[1].first == "beta1");
  BOOST_TEST(state[1].second.item() == 0.8);
  BOOST_TEST(state[5].first == "step");
  BOOST_TEST(state[5].second.dtype() == DType::i64);
  BOOST_TEST(state[5].second.item<std::int64_t>() == 2);
  BOOST_TEST(state[7].first == "state.0.exp_avg");
  BOOST_TEST(state[7].second.item() == m, tt::tolerance(1e-15));
  BOOST_TEST(state[8].first == "state.0.exp_avg_sq");
  BOOST_TEST(state[8].second.item() == v, tt::tolerance(1e-15));
}

BOOST_AUTO_TEST_CASE(loading_a_mismatched_state_is_an_error_that_changes_nothing) {
  Tensor a = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  a.requires_grad_();
  a.set_grad(full({2, 3}, 0.5, DType::f64));
  optim::AdamW opt({a}, 0.1);
  opt.step();
  nn::StateDict state = opt.state_dict();

  Tensor t = zeros({3, 2}, DType::f64);
  t.requires_grad_();
  optim::AdamW transposed({t}, 0.5);
  KILN_CHECK_THROWS(transposed.load_state_dict(state), ShapeError, "state.0.exp_avg", "[2, 3]",
                    "[3, 2]");
  BOOST_TEST(transposed.lr() == 0.5);
  BOOST_TEST(transposed.steps() == 0);

  Tensor u = zeros({2, 3}, DType::f64);
  u.requires_grad_();
  optim::AdamW two({a, u}, 0.5);
  KILN_CHECK_THROWS(two.load_state_dict(state), Error, "num_params", "1", "2");

  nn::StateDict missing(state.begin() + 1, state.end());
  KILN_CHECK_THROWS(opt.load_state_dict(missing), Error, "AdamW.load_state_dict", "'lr'");
  nn::StateDict half = state;
  half.pop_back();  // exp_avg_sq gone
  KILN_CHECK_THROWS(opt.load_state_dict(half), Error, "state.0.exp_avg_sq");
  optim::SGD sgd({a}, 0.1, 0.9);
  KILN_CHECK_THROWS(sgd.load_state_dict(state), Error, "SGD.load_state_dict", "momentum");
  nn::StateDict bad_beta = state;
  bad_beta[1].second = scalar_tensor(1.5, DType::f64);
  KILN_CHECK_THROWS(opt.load_state_dict(bad_beta), Error, "AdamW", "1.5");
  nn::StateDict float_step = state;
  float_step[5].second = scalar_tensor(1.0, DType::f64);
  KILN_CHECK_THROWS(opt.load_state_dict(float_step), Error, "'step'", "f64");
  BOOST_TEST(opt.steps() == 1);
  BOOST_TEST(opt.lr() == 0.1);
}

namespace {

struct Mlp : nn::Module {
  nn::Linear fc1, fc2;
  explicit Mlp(Generator& gen)
      : fc1(3, 5, true, DType::f32, &gen), fc2(5, 2, true, DType::f32, &gen) {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor operator()(const Tensor& x) const { return fc2(tanh(fc1(x))); }
};

// One training step on fixed data, clipping the gradients first.
void train_step(Mlp& model, optim::Optimizer& opt, optim::LRScheduler& sched, int i) {
  Generator gen(100 + i);
  Tensor x = randn({8, 3}, DType::f32, &gen), y = randn({8, 2}, DType::f32, &gen);
  Tensor loss = mse_loss(model(x), y);
  opt.zero_grad();
  loss.backward();
  optim::clip_grad_norm_(model.parameters(), 0.5);
  opt.step();
  sched.step();
}

std::vector<std::vector<float>> values(const Mlp& model) {
  std::vector<std::vector<float>> out;
  for (auto& p : model.parameters()) out.push_back(p.to_vector<float>());
  return out;
}

// Trains 3 steps, checkpoints through safetensors files, trains 4 more; a fresh model and
// optimizer loaded from the checkpoint must reach bitwise the same parameters in those 4 steps.
template <typename MakeOpt>
void check_resume(MakeOpt make_opt) {
  TempDir dir;
  Generator gen(7);
  Mlp model(gen);
  auto opt = make_opt(model.parameters(), 0.05);
  optim::CosineWithWarmup sched(*opt, 2, 10, 0.001);
  for (int i = 0; i < 3; ++i) train_step(model, *opt, sched, i);
  model.save(dir.file("model.safetensors"));
  save_safetensors(dir.file("optim.safetensors"), opt->state_dict());
  save_safetensors(dir.file("sched.safetensors"), sched.state_dict());
  auto at_checkpoint = values(model);
  for (int i = 3; i < 7; ++i) train_step(model, *opt, sched, i);

  Generator other(8);
  Mlp resumed(other);
  auto opt2 = make_opt(resumed.parameters(), 0.9);
  optim::CosineWithWarmup sched2(*opt2, 5, 50);
  resumed.load(dir.file("model.safetensors"));
  opt2->load_state_dict(load_safetensors(dir.file("optim.safetensors")).tensors);
  sched2.load_state_dict(load_safetensors(dir.file("sched.safetensors")).tensors);
  BOOST_TEST(sched2.last_epoch() == 3);
  BOOST_TEST((values(resumed) == at_checkpoint));
  for (int i = 3; i < 7; ++i) train_step(resumed, *opt2, sched2, i);
  BOOST_TEST((values(resumed) == values(model)));  // bitwise
  BOOST_TEST((values(model) != at_checkpoint));    // the steps did move the parameters
  BOOST_TEST(opt2->lr() == opt->lr());
}

}  // namespace

BOOST_AUTO_TEST_CASE(adamw_checkpoint_resumes_bitwise) {
  check_resume([](std::vector<Tensor> params, double lr) {
    return std::make_unique<optim::AdamW>(std::move(params), lr, 0.9, 0.99, 1e-8, 0.05);
  });
}

BOOST_AUTO_TEST_CASE(sgd_nesterov_checkpoint_resumes_bitwise) {
  check_resume([](std::vector<Tensor> params, double lr) {
    return std::make_unique<optim::SGD>(std::move(params), lr, 0.9, 1e-3, true);
  });
}

BOOST_AUTO_TEST_SUITE_END()
