// GradScaler (loss scaling) on the CPU reference path and on CUDA (the virtual GPU): the scale's
// backoff and growth against a sequence worked out by hand from torch.amp.GradScaler's rule,
// unscaled gradients and skipped steps against optimizers stepped only on the iterations
// without an inf, AdamW's bias corrections counting the steps taken, a warm scaled step that
// never waits on the host, state dicts, and bad input.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "autograd/grad_scaler.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "jit/codegen/launch_stats.h"
#include "runtime/cuda/host_sync.h"
#include "runtime/cuda_backend.h"
#include "runtime/grad_mode.h"
#include "support/reference.h"

using namespace kiln;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

// Parameters of mixed sizes (0, 1 and 4097 elements, a matrix) on `device`, with a CPU copy.
struct Model {
  std::vector<Tensor> params;     // on the device under test
  std::vector<Tensor> reference;  // CPU copies the reference optimizer updates
};

Model make_model(Device device, DType dtype, std::uint32_t seed) {
  NoGradGuard no_grad;
  std::mt19937 rng(seed);
  Model m;
  for (Shape shape : {Shape{0}, Shape{1}, Shape{4097}, Shape{7, 5}}) {
    auto values = test::host_random(static_cast<std::size_t>(numel(shape)), -1, 1, rng());
    Tensor host = test::typed(dtype, values, shape);
    m.params.push_back(host.to(device).requires_grad_());
    m.reference.push_back(host.clone().requires_grad_());
  }
  return m;
}

// A loss whose gradient for parameter i is coefficients[i] (scaled by the scaler): sum(p * c).
// An infinite coefficient makes the loss and that gradient infinite.
Tensor linear_loss(const std::vector<Tensor>& params, const std::vector<Tensor>& coefficients) {
  Tensor loss;
  for (std::size_t i = 0; i < params.size(); ++i) {
    Tensor term = sum(params[i] * coefficients[i].to(params[i].device()));
    loss = loss.defined() ? loss + term : term;
  }
  return loss;
}

// Random coefficients per parameter (powers of two times small integers, so that scaling and
// unscaling by powers of two are exact); `poison` puts an inf into parameter 2's.
std::vector<Tensor> coefficients(const Model& m, std::mt19937& rng, bool poison) {
  std::uniform_int_distribution<int> dist(-8, 8);
  std::vector<Tensor> out;
  for (std::size_t i = 0; i < m.reference.size(); ++i) {
    std::vector<double> c(static_cast<std::size_t>(m.reference[i].numel()));
    for (auto& x : c) x = dist(rng) / 16.0;
    if (poison && i == 2) c[100] = kInf;
    out.push_back(test::typed(m.reference[i].dtype(), c, m.reference[i].shape()));
  }
  return out;
}

void check_matches_reference(const Model& m, const std::string& when) {
  for (std::size_t i = 0; i < m.params.size(); ++i)
    BOOST_TEST_CONTEXT(when << ", parameter " << i << " " << shape_str(m.params[i].shape())) {
      test::check_close(m.params[i].to(Device::cpu()), m.reference[i].shape(),
                        m.reference[i].to_vector<double>(), 1e-5, 1e-6);
    }
}

std::int64_t copies_to_host() {
  return cuda::host_sync_stats().device_to_host_copies.load();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(grad_scaler)

BOOST_AUTO_TEST_CASE(the_scale_backs_off_on_an_inf_and_grows_after_the_interval) {
  // torch's rule by hand, with growth_interval 3 and backoff 1/4: an inf quarters the scale and
  // resets the count; three clean steps in a row double it.
  const std::vector<bool> inf_at = {false, false, true, false, false,
                                    false, false, true, true,  false};
  const std::vector<double> scale_after = {1024, 1024, 256, 256, 256, 512, 512, 128, 32, 32};
  for (Device device : {Device::cpu(), Device::cuda()}) {
    BOOST_TEST_CONTEXT("on " << device.str()) {
      Model m = make_model(device, DType::f32, 7);
      amp::GradScaler::Options options;
      options.init_scale = 1024;
      options.growth_interval = 3;
      options.backoff_factor = 0.25;
      amp::GradScaler scaler(options);
      optim::SGD opt(m.params, 0.5);
      optim::SGD reference(m.reference, 0.5);
      BOOST_TEST(opt.fused() == device.is_cuda());
      std::mt19937 rng(11);
      for (std::size_t it = 0; it < inf_at.size(); ++it) {
        auto c = coefficients(m, rng, inf_at[it]);
        opt.zero_grad();
        scaler.scale(linear_loss(m.params, c)).backward();
        scaler.step(opt);
        scaler.update();
        if (!inf_at[it]) {  // the reference steps on the clean iterations only
          reference.zero_grad();
          linear_loss(m.reference, c).backward();
          reference.step();
        }
        BOOST_TEST(scaler.get_scale() == scale_after[it], "iteration " << it);
        check_matches_reference(m, fmt::format("iteration {}", it));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(adamw_skips_the_flagged_step_and_corrects_bias_by_the_steps_taken) {
  // f32 and f64 parameters: two launches per step, and the skip counted once. After the
  // scaled iterations, plain steps still count the skipped one out of the bias corrections.
  Model m = make_model(Device::cuda(), DType::f32, 3);
  Model m64 = make_model(Device::cuda(), DType::f64, 4);
  m.params.insert(m.params.end(), m64.params.begin(), m64.params.end());
  m.reference.insert(m.reference.end(), m64.reference.begin(), m64.reference.end());
  amp::GradScaler scaler;  // torch's defaults: 65536, x2 every 2000, x0.5 on an inf
  optim::AdamW opt(m.params, 1e-2);
  optim::AdamW reference(m.reference, 1e-2);
  BOOST_TEST_REQUIRE(opt.fused());
  std::mt19937 rng(5);
  int taken = 0;
  for (int it = 0; it < 6; ++it) {
    bool poison = it == 2;
    auto c = coefficients(m, rng, poison);
    opt.zero_grad();
    std::int64_t launched = jit::codegen::launch_stats().launches.load();
    scaler.scale(linear_loss(m.params, c)).backward();
    scaler.unscale_(opt);
    if (!poison)  // the unscaled gradients are the loss's own
      for (std::size_t i = 0; i < m.params.size(); ++i)
        test::check_values(m.params[i].grad().to(Device::cpu()), c[i].shape(),
                           c[i].to_vector<double>());
    std::int64_t before_step = jit::codegen::launch_stats().launches.load();
    scaler.step(opt);
    BOOST_TEST(jit::codegen::launch_stats().launches.load() - before_step == 2);  // f32, f64
    scaler.update();
    BOOST_TEST(jit::codegen::launch_stats().launches.load() > launched);
    if (!poison) {
      ++taken;
      reference.zero_grad();
      linear_loss(m.reference, c).backward();
      reference.step();
    }
    BOOST_TEST(opt.steps() == taken);
    BOOST_TEST(scaler.get_scale() == (it < 2 ? 65536.0 : 32768.0));
    check_matches_reference(m, fmt::format("iteration {}", it));
  }
  for (int it = 0; it < 2; ++it) {  // unscaled steps after a skipped one
    auto c = coefficients(m, rng, false);
    opt.zero_grad();
    reference.zero_grad();
    linear_loss(m.params, c).backward();
    linear_loss(m.reference, c).backward();
    opt.step();
    reference.step();
  }
  BOOST_TEST(opt.steps() == taken + 2);
  check_matches_reference(m, "after plain steps");
  auto state = opt.state_dict();
  for (const auto& [key, value] : state)
    if (key == "step") BOOST_TEST(value.item() == taken + 2);
}

BOOST_AUTO_TEST_CASE(unscale_then_clip_then_step_as_torch_documents) {
  // scale -> backward -> unscale_ -> clip -> step -> update: the clip sees unscaled gradients.
  Model m = make_model(Device::cuda(), DType::f32, 9);
  amp::GradScaler scaler;
  optim::SGD opt(m.params, 0.1, 0.9);
  optim::SGD reference(m.reference, 0.1, 0.9);
  std::mt19937 rng(2);
  for (int it = 0; it < 3; ++it) {
    auto c = coefficients(m, rng, false);
    opt.zero_grad();
    reference.zero_grad();
    scaler.scale(linear_loss(m.params, c)).backward();
    scaler.unscale_(opt);
    Tensor norm = optim::clip_grad_norm_tensor_(m.params, 1.0);
    scaler.step(opt);
    scaler.update();
    linear_loss(m.reference, c).backward();
    double want = optim::clip_grad_norm_(m.reference, 1.0);
    reference.step();
    BOOST_TEST(norm.item() == want, boost::test_tools::tolerance(1e-5));
    check_matches_reference(m, fmt::format("iteration {}", it));
  }
}

BOOST_AUTO_TEST_CASE(a_warm_scaled_step_never_waits_on_the_host) {
  Model m = make_model(Device::cuda(), DType::f32, 13);
  amp::GradScaler scaler;
  optim::AdamW opt(m.params, 1e-3);
  std::mt19937 rng(1);
  std::vector<std::vector<Tensor>> cs;
  for (int i = 0; i < 6; ++i) {  // on the device before counting: uploads are not the step's
    cs.push_back(coefficients(m, rng, i == 4));
    for (auto& t : cs.back()) t = t.to(Device::cuda());
  }
  auto iteration = [&](int i) {
    opt.zero_grad();
    scaler.scale(linear_loss(m.params, cs[static_cast<std::size_t>(i)])).backward();
    scaler.unscale_(opt);
    optim::clip_grad_norm_tensor_(m.params, 1.0);
    scaler.step(opt);
    scaler.update();
  };
  for (int i = 0; i < 3; ++i) iteration(i);
  auto& alloc = cuda_allocator();
  std::int64_t copies = copies_to_host(), syncs = cuda::host_sync_stats().synchronizations.load();
  std::int64_t compiles = jit::codegen::launch_stats().compiles.load();
  std::size_t backend_allocs = alloc.stats().num_backend_allocs;
  for (int i = 3; i < 6; ++i) iteration(i);  // one of them skips
  BOOST_TEST(copies_to_host() - copies == 0);
  BOOST_TEST(cuda::host_sync_stats().synchronizations.load() - syncs == 0);
  BOOST_TEST(jit::codegen::launch_stats().compiles.load() == compiles);
  BOOST_TEST(alloc.stats().num_backend_allocs == backend_allocs);
  BOOST_TEST(opt.steps() == 5);  // reading the count is the user's choice, and a copy
  BOOST_TEST(scaler.get_scale() == 32768.0);
}

BOOST_AUTO_TEST_CASE(state_dicts_carry_the_scale_and_the_growth_count) {
  for (Device device : {Device::cpu(), Device::cuda()}) {
    Model m = make_model(device, DType::f32, 21);
    amp::GradScaler::Options options;
    options.growth_interval = 3;
    amp::GradScaler scaler(options);
    optim::SGD opt(m.params, 0.1);
    std::mt19937 rng(3);
    auto iteration = [&](amp::GradScaler& s) {
      opt.zero_grad();
      s.scale(linear_loss(m.params, coefficients(m, rng, false))).backward();
      s.step(opt);
      s.update();
    };
    iteration(scaler);
    iteration(scaler);  // two clean steps: one more doubles the scale
    amp::GradScaler resumed;
    resumed.load_state_dict(scaler.state_dict());
    BOOST_TEST(resumed.get_scale() == 65536.0);
    iteration(resumed);
    BOOST_TEST(resumed.get_scale() == 131072.0, "on " << device.str());
  }
}

BOOST_AUTO_TEST_CASE(a_disabled_scaler_passes_through) {
  Model m = make_model(Device::cuda(), DType::f32, 5);
  amp::GradScaler::Options options;
  options.enabled = false;
  amp::GradScaler scaler(options);
  optim::SGD opt(m.params, 0.1);
  optim::SGD reference(m.reference, 0.1);
  std::mt19937 rng(4);
  auto c = coefficients(m, rng, false);
  Tensor loss = linear_loss(m.params, c);
  BOOST_TEST(scaler.scale(loss).impl().storage == loss.impl().storage);
  loss.backward();
  scaler.step(opt);
  scaler.update();
  linear_loss(m.reference, c).backward();
  reference.step();
  check_matches_reference(m, "disabled");
  BOOST_TEST(scaler.get_scale() == 1.0);
}

BOOST_AUTO_TEST_CASE(bad_input_names_the_scaler_and_the_reason) {
  using Opts = amp::GradScaler::Options;
  Opts bad_scale;
  bad_scale.init_scale = 0;
  KILN_CHECK_THROWS(amp::GradScaler{bad_scale}, Error, "GradScaler", "scale", "0");
  Opts bad_growth;
  bad_growth.growth_factor = 1;
  KILN_CHECK_THROWS(amp::GradScaler{bad_growth}, Error, "growth_factor");
  Opts bad_backoff;
  bad_backoff.backoff_factor = 1.5;
  KILN_CHECK_THROWS(amp::GradScaler{bad_backoff}, Error, "backoff_factor", "1.5");

  Model m = make_model(Device::cuda(), DType::f32, 8);
  optim::SGD opt(m.params, 0.1);
  std::mt19937 rng(6);
  auto c = coefficients(m, rng, false);
  amp::GradScaler scaler;
  linear_loss(m.params, c).backward();
  KILN_CHECK_THROWS(scaler.unscale_(opt), Error, "GradScaler.unscale_", "scale() was never called");
  KILN_CHECK_THROWS(scaler.update(), Error, "GradScaler.update", "no inf check");
  opt.zero_grad();
  scaler.scale(linear_loss(m.params, c)).backward();
  scaler.unscale_(opt);
  KILN_CHECK_THROWS(scaler.unscale_(opt), Error, "GradScaler.unscale_", "already called", "SGD");
  scaler.step(opt);
  KILN_CHECK_THROWS(scaler.step(opt), Error, "GradScaler.step", "already called");
  KILN_CHECK_THROWS(scaler.unscale_(opt), Error, "after step()");
  scaler.update();
  KILN_CHECK_THROWS(scaler.scale(linear_loss(m.reference, c)), Error, "GradScaler.scale", "cpu",
                    "cuda");
  KILN_CHECK_THROWS(scaler.scale(Tensor(test::i64s({1}))), DTypeError, "GradScaler.scale", "i64");

  // Half gradients: loss scaling keeps f32 master weights.
  Model half = make_model(Device::cuda(), DType::f16, 9);
  optim::SGD half_opt(half.params, 0.1);
  auto hc = coefficients(half, rng, false);
  amp::GradScaler half_scaler;
  half_scaler.scale(linear_loss(half.params, hc)).backward();
  KILN_CHECK_THROWS(half_scaler.unscale_(half_opt), DTypeError, "GradScaler.unscale_", "f16",
                    "master weights");

  KILN_CHECK_THROWS(opt.step_unless(zeros({}, DType::i64, Device::cuda())), Error,
                    "SGD.step_unless", "f32");
  KILN_CHECK_THROWS(opt.step_unless(zeros({}, DType::f32)), Error, "SGD.step_unless", "cpu");
}

BOOST_AUTO_TEST_SUITE_END()
