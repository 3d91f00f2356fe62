// The fused multi-tensor optimizers on CUDA tensors (the virtual GPU here): AdamW and SGD against
// the reference optimizers on CPU copies of the same parameters over 20 steps (f32; sizes from 0
// elements to 2^20 + 3, odd sizes, views, random lists) and f16/bf16 parameters against a host
// model of the fused arithmetic, launches per step counted by the launch counters, an lr
// schedule that compiles nothing, state dicts, and bad input. Clipping: test_fused_clip.cpp.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "autograd/lr_scheduler.h"
#include "autograd/optim.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/multi_tensor.h"
#include "runtime/cuda/host_sync.h"
#include "runtime/cuda_backend.h"
#include "runtime/grad_mode.h"
#include "support/launch_counts.h"
#include "support/reference.h"

using namespace kiln;
using test::compiles;
using test::launches;
using test::lookups;
using test::normal_values;
namespace tt = boost::test_tools;

namespace {

const Device kCuda = Device::cuda();

// How a parameter sits in memory.
enum class Layout {
  contiguous,
  offset_rows,  // rows 1.. of a bigger matrix: contiguous, at a storage offset
  transposed,   // a transposed matrix: dense, not contiguous
  strided,      // every other column: neither (the fused step rejects it)
};

struct ParamSpec {
  Shape shape;
  DType dtype = DType::f32;
  Layout layout = Layout::contiguous;
};

// The fused step's arithmetic for one f16/bf16 parameter, on the host: every value computed in
// f32 from the stored ones (torch's formulas), every stored value rounded once to the dtype. The
// reference optimizers round after each op, which for half dtypes drifts far from any fused
// kernel (and overflows in f16: eps underflows to 0), so half parameters are checked against this.
struct HalfModel {
  DType dtype = DType::bf16;
  std::vector<float> p, s1, s2;  // parameter, first and second state buffers (zero at first)

  float stored(float x) const { return static_cast<float>(test::round_to(dtype, x)); }
  void adamw(const std::vector<float>& g, double lr, double beta1, double beta2, double eps,
             double weight_decay, std::int64_t step) {
    auto t = static_cast<double>(step);
    auto decay = static_cast<float>(1 - lr * weight_decay), b1 = static_cast<float>(beta1),
         c1 = static_cast<float>(1 - beta1), b2 = static_cast<float>(beta2),
         c2 = static_cast<float>(1 - beta2),
         bias2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(beta2, t))),
         e = static_cast<float>(eps),
         step_size = static_cast<float>(-lr / (1 - std::pow(beta1, t)));
    for (std::size_t i = 0; i < p.size(); ++i) {
      float param = p[i] * decay, m = s1[i] * b1 + g[i] * c1, v = s2[i] * b2 + g[i] * g[i] * c2;
      float denom = std::sqrt(v) / bias2_sqrt + e;
      s1[i] = stored(m);
      s2[i] = stored(v);
      p[i] = stored(param + m / denom * step_size);
    }
  }
  void sgd(const std::vector<float>& g, double lr, double momentum, double weight_decay,
           bool nesterov) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      float grad = g[i];
      if (weight_decay != 0) grad = grad + p[i] * static_cast<float>(weight_decay);
      if (momentum != 0) {
        s1[i] = stored(s1[i] * static_cast<float>(momentum) + grad);
        grad = nesterov ? grad + s1[i] * static_cast<float>(momentum) : s1[i];
      }
      p[i] = stored(p[i] + grad * static_cast<float>(-lr));
    }
  }
};

std::vector<float> floats_of(const Tensor& t) {
  auto d = t.to(Device::cpu()).to_vector<double>();
  return std::vector<float>(d.begin(), d.end());
}

// One parameter twice: on the device laid out as asked (a leaf view of `base` for the views),
// and a contiguous CPU copy the reference optimizer updates (f32), or a host model (f16/bf16).
struct ParamPair {
  ParamSpec spec;
  Tensor base;  // the device storage the parameter views (itself when contiguous)
  Tensor device, host;
  HalfModel model;

  bool half() const { return spec.dtype != DType::f32; }
};

ParamPair make_param(const ParamSpec& spec, std::mt19937& rng) {
  NoGradGuard no_grad;
  ParamPair out{spec, {}, {}, {}, {}};
  Shape base_shape = spec.shape;
  if (spec.layout == Layout::offset_rows) base_shape[0] += 1;
  if (spec.layout == Layout::transposed) std::swap(base_shape[0], base_shape[1]);
  if (spec.layout == Layout::strided) base_shape[1] *= 2;
  auto values = normal_values(static_cast<std::size_t>(numel(base_shape)), rng);
  out.base = test::typed(spec.dtype, values, base_shape).to(kCuda);
  switch (spec.layout) {
    case Layout::contiguous:
      out.device = out.base;
      break;
    case Layout::offset_rows:
      out.device = out.base.slice(0, 1, base_shape[0]);
      break;
    case Layout::transposed:
      out.device = out.base.t();
      break;
    case Layout::strided:
      out.device = out.base.slice(1, 0, base_shape[1], 2);
      break;
  }
  out.host = out.device.to(Device::cpu()).contiguous();
  out.device.requires_grad_();
  out.host.requires_grad_();
  out.model.dtype = spec.dtype;
  out.model.p = floats_of(out.host);
  out.model.s1.assign(out.model.p.size(), 0.0f);
  out.model.s2.assign(out.model.p.size(), 0.0f);
  return out;
}

// Fresh random gradients for both copies: the same values, in the parameter's dtype.
void set_random_grads(std::vector<ParamPair>& params, std::mt19937& rng) {
  for (auto& p : params) {
    auto g = normal_values(static_cast<std::size_t>(numel(p.spec.shape)), rng, 0.5);
    Tensor host = test::typed(p.spec.dtype, g, p.spec.shape);
    p.host.set_grad(host);
    p.device.set_grad(host.to(kCuda));
  }
}

std::vector<Tensor> device_params(const std::vector<ParamPair>& params) {
  std::vector<Tensor> out;
  for (const auto& p : params) out.push_back(p.device);
  return out;
}
// The CPU copies of the f32 parameters (the half ones follow their host models).
std::vector<Tensor> host_params(const std::vector<ParamPair>& params) {
  std::vector<Tensor> out;
  for (const auto& p : params)
    if (!p.half()) out.push_back(p.host);
  return out;
}

// f32 differs from the reference by rounding alone (the kernel may contract a multiply-add into
// an FMA); a half parameter from its host model by a rounding flip or two.
void check_params_match(const std::vector<ParamPair>& params, const std::string& when) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    BOOST_TEST_CONTEXT(when << ", parameter " << i << " " << shape_str(p.spec.shape) << " "
                            << dtype_name(p.spec.dtype) << " layout "
                            << static_cast<int>(p.spec.layout)) {
      if (p.half())
        test::check_close(p.device.to(Device::cpu()), p.spec.shape,
                          std::vector<double>(p.model.p.begin(), p.model.p.end()),
                          2 * test::rtol_for(p.spec.dtype), 1e-4);
      else
        test::check_close(p.device.to(Device::cpu()), p.spec.shape, p.host.to_vector<double>(),
                          1e-5, 1e-6);
    }
  }
}

// Runs the fused optimizer and the references (`make` on the f32 CPU copies, `model_step` on the
// half parameters' host models) `steps` steps on the same gradients.
template <class MakeOptimizer>
void run_against_reference(
    std::vector<ParamPair>& params, MakeOptimizer make,
    const std::function<void(HalfModel&, const std::vector<float>&, int)>& model_step, int steps,
    std::uint32_t seed) {
  auto fused = make(device_params(params));
  auto reference = make(host_params(params));
  BOOST_TEST_REQUIRE(fused->fused());
  BOOST_TEST_REQUIRE(!reference->fused());
  std::mt19937 rng(seed);
  for (int step = 1; step <= steps; ++step) {
    set_random_grads(params, rng);
    fused->step();
    reference->step();
    for (auto& p : params)
      if (p.half()) model_step(p.model, floats_of(p.host.grad()), step);
    if (step == 1 || step == steps) check_params_match(params, fmt::format("step {}", step));
  }
}

std::vector<ParamSpec> mixed_f32_specs() {
  return {{{0}},
          {{1}},
          {{3}},
          {{127, 3}},
          {{4096}},
          {{4097}},
          {{2, 0, 5}},
          {{9001}},
          {{6, 33}, DType::f32, Layout::offset_rows},
          {{17, 9}, DType::f32, Layout::transposed}};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fused_optimizers)

BOOST_AUTO_TEST_CASE(adamw_matches_the_reference_over_20_steps_with_an_lr_schedule) {
  std::mt19937 rng(11);
  std::vector<ParamPair> params;
  for (const auto& s : mixed_f32_specs()) params.push_back(make_param(s, rng));

  const double lr = 2e-2;
  optim::AdamW fused(device_params(params), lr, 0.9, 0.95, 1e-8, 0.1);
  optim::AdamW reference(host_params(params), lr, 0.9, 0.95, 1e-8, 0.1);
  BOOST_TEST_REQUIRE(fused.fused());
  // A schedule on each: the lr changes every step, and the fused one must compile nothing new.
  optim::CosineWithWarmup fused_schedule(fused, 3, 20, 1e-3);
  optim::CosineWithWarmup reference_schedule(reference, 3, 20, 1e-3);
  std::mt19937 grads_rng(5);
  std::int64_t compiles_after_first = 0, lookups_after_first = 0;
  for (int step = 1; step <= 20; ++step) {
    set_random_grads(params, grads_rng);
    fused.step();
    reference.step();
    fused_schedule.step();
    reference_schedule.step();
    if (step == 1) {
      compiles_after_first = compiles();
      lookups_after_first = lookups();
    }
    if (step == 1 || step == 10 || step == 20)
      check_params_match(params, fmt::format("step {}", step));
  }
  BOOST_TEST(fused.lr() != lr);  // the schedule did move it
  BOOST_TEST(compiles() == compiles_after_first);
  BOOST_TEST(lookups() == lookups_after_first);  // not even a kernel cache lookup
  // The moments agree too (state dicts: copies of the fused optimizer's device state).
  auto fused_state = fused.state_dict(), reference_state = reference.state_dict();
  BOOST_TEST_REQUIRE(fused_state.size() == reference_state.size());
  for (std::size_t k = 0; k < fused_state.size(); ++k) {
    BOOST_TEST_CONTEXT(fused_state[k].first) {
      BOOST_TEST(fused_state[k].first == reference_state[k].first);
      const Tensor& want = reference_state[k].second;
      test::check_close(fused_state[k].second.to(Device::cpu()), want.shape(),
                        want.to_vector<double>(), 1e-5, 1e-6);
    }
  }
}

BOOST_AUTO_TEST_CASE(half_precision_parameters_match_the_reference_in_one_launch_per_dtype) {
  std::mt19937 rng(12);
  std::vector<ParamPair> params;
  for (DType t : {DType::bf16, DType::f32, DType::f16})
    for (Shape s : {Shape{1}, Shape{301}, Shape{4100}, Shape{64, 65}})
      params.push_back(make_param({s, t}, rng));
  params.push_back(make_param({{9, 4}, DType::bf16, Layout::offset_rows}, rng));
  const double lr = 1e-2;
  run_against_reference(
      params,
      [&](std::vector<Tensor> p) {
        return std::make_unique<optim::AdamW>(std::move(p), lr, 0.9, 0.999, 1e-8, 0.05);
      },
      [&](HalfModel& m, const std::vector<float>& g, int step) {
        m.adamw(g, lr, 0.9, 0.999, 1e-8, 0.05, step);
      },
      20, 3);
  // Launches per warm step: one per dtype group.
  optim::AdamW fused(device_params(params), lr);
  std::mt19937 grads_rng(4);
  set_random_grads(params, grads_rng);
  fused.step();
  std::int64_t before = launches();
  fused.step();
  BOOST_TEST(launches() - before == 3);
}

BOOST_AUTO_TEST_CASE(sgd_variants_match_the_reference_over_20_steps) {
  struct Variant {
    double momentum, weight_decay;
    bool nesterov;
  };
  for (Variant v : {Variant{0, 0, false}, Variant{0, 0.1, false}, Variant{0.9, 0, false},
                    Variant{0.9, 0.01, true}}) {
    BOOST_TEST_CONTEXT("momentum " << v.momentum << ", weight decay " << v.weight_decay
                                   << ", nesterov " << v.nesterov) {
      std::mt19937 rng(13);
      std::vector<ParamPair> params;
      for (const auto& s : mixed_f32_specs()) params.push_back(make_param(s, rng));
      params.push_back(make_param({{33, 3}, DType::bf16}, rng));
      const double lr = 0.05;
      run_against_reference(
          params,
          [&](std::vector<Tensor> p) {
            return std::make_unique<optim::SGD>(std::move(p), lr, v.momentum, v.weight_decay,
                                                v.nesterov);
          },
          [&](HalfModel& m, const std::vector<float>& g, int) {
            m.sgd(g, lr, v.momentum, v.weight_decay, v.nesterov);
          },
          20, 7);
    }
  }
}

BOOST_AUTO_TEST_CASE(random_parameter_lists_match_the_reference_over_20_steps) {
  // Lists drawn at random: 0 to 2^14 elements (log-uniform; 2^20 + 3 has a case of its own),
  // f32/bf16/f16, contiguous, at an offset or transposed, in random order.
  for (std::uint32_t seed : {21u, 22u, 23u}) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> count(4, 10), pick3(0, 2);
    std::uniform_real_distribution<double> log_size(0, 14);
    std::vector<ParamPair> params;
    for (int i = count(rng); i > 0; --i) {
      auto n = static_cast<std::int64_t>(std::exp2(log_size(rng))) - 1;  // 0 included
      const DType dtypes[] = {DType::f32, DType::bf16, DType::f16};
      ParamSpec spec{{n}, dtypes[pick3(rng)]};
      if (int layout = pick3(rng); layout != 0 && n >= 4) {
        spec.shape = {n / 4, 4};
        spec.layout = layout == 1 ? Layout::offset_rows : Layout::transposed;
      }
      params.push_back(make_param(spec, rng));
    }
    BOOST_TEST_CONTEXT("seed " << seed << ", " << params.size() << " parameters") {
      const double lr = 1e-2;
      run_against_reference(
          params,
          [&](std::vector<Tensor> p) {
            return std::make_unique<optim::AdamW>(std::move(p), lr, 0.9, 0.99, 1e-8, 0.01);
          },
          [&](HalfModel& m, const std::vector<float>& g, int step) {
            m.adamw(g, lr, 0.9, 0.99, 1e-8, 0.01, step);
          },
          20, seed);
      for (auto& p : params) {  // SGD from the parameters AdamW left: fresh state, same checks
        p.model.p = floats_of(p.device);
        p.model.s1.assign(p.model.p.size(), 0.0f);
        NoGradGuard no_grad;
        p.host = p.device.to(Device::cpu()).contiguous().requires_grad_();
      }
      run_against_reference(
          params,
          [&](std::vector<Tensor> p) {
            return std::make_unique<optim::SGD>(std::move(p), lr, 0.9, 0.01, true);
          },
          [&](HalfModel& m, const std::vector<float>& g, int) { m.sgd(g, lr, 0.9, 0.01, true); },
          20, seed + 100);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_warm_step_is_one_launch_and_uploads_no_table) {
  std::mt19937 rng(14);
  std::vector<ParamPair> params;
  for (Shape s : {Shape{1}, Shape{4097}, Shape{100, 7}, Shape{0}})
    params.push_back(make_param({s}, rng));
  for (bool adam : {true, false}) {
    BOOST_TEST_CONTEXT((adam ? "AdamW" : "SGD with momentum")) {
      std::unique_ptr<optim::Optimizer> opt;
      if (adam)
        opt = std::make_unique<optim::AdamW>(device_params(params), 1e-3);
      else
        opt = std::make_unique<optim::SGD>(device_params(params), 1e-2, 0.9);
      set_random_grads(params, rng);
      opt->step();  // first step: zero-filled state, the table uploaded
      // Gradients written in place, as an accumulating backward leaves them: the table holds.
      std::int64_t launches_before = launches();
      std::int64_t uploads_before = jit::codegen::multi_tensor_table_uploads();
      for (int step = 0; step < 3; ++step) {
        opt->set_lr(1e-3 * (step + 2));
        opt->step();
      }
      BOOST_TEST(launches() - launches_before == 3);
      BOOST_TEST(jit::codegen::multi_tensor_table_uploads() == uploads_before);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_million_element_parameter) {
  // 2^20 + 3 elements (a tail chunk) next to small ones, two SGD-with-momentum steps: the
  // interpreter's time here is dominated by this tensor, so it runs the cheapest update.
  std::mt19937 rng(15);
  std::vector<ParamPair> params;
  for (Shape s : {Shape{(1 << 20) + 3}, Shape{5}}) params.push_back(make_param({s}, rng));
  const double lr = 0.1;
  run_against_reference(
      params,
      [&](std::vector<Tensor> p) { return std::make_unique<optim::SGD>(std::move(p), lr, 0.9); },
      [](HalfModel&, const std::vector<float>&, int) {}, 2, 8);
}

BOOST_AUTO_TEST_CASE(fused_and_per_op_device_steps_agree) {
  // set_fused(false) runs the reference ops on the device: the same math, many launches.
  std::mt19937 rng(16);
  std::vector<ParamPair> a, b;
  for (Shape s : {Shape{3}, Shape{2000}}) {
    a.push_back(make_param({s}, rng));
    b.push_back(ParamPair{a.back().spec, {}, a.back().device.detach().clone(), {}, {}});
    b.back().device.requires_grad_();
  }
  optim::AdamW fused(device_params(a), 1e-2), per_op(device_params(b), 1e-2);
  per_op.set_fused(false);
  BOOST_TEST(!per_op.fused());
  std::mt19937 grads_rng(6);
  for (int step = 0; step < 3; ++step) {
    set_random_grads(a, grads_rng);
    for (std::size_t i = 0; i < a.size(); ++i) b[i].device.set_grad(a[i].device.grad().clone());
    std::int64_t before = launches();
    fused.step();
    BOOST_TEST(launches() - before == 1);
    before = launches();
    per_op.step();
    BOOST_TEST(launches() - before > 2 * static_cast<std::int64_t>(a.size()));
  }
  for (std::size_t i = 0; i < a.size(); ++i)
    test::check_close(a[i].device.to(Device::cpu()), a[i].spec.shape,
                      b[i].device.to(Device::cpu()).to_vector<double>(), 1e-5, 1e-6);
}

BOOST_AUTO_TEST_CASE(state_dicts_are_snapshots_and_resume_the_fused_step) {
  std::mt19937 rng(17);
  std::vector<ParamPair> params;
  for (Shape s : {Shape{7}, Shape{300}}) params.push_back(make_param({s}, rng));
  optim::AdamW fused(device_params(params), 1e-2);
  optim::AdamW reference(host_params(params), 1e-2);
  std::mt19937 grads_rng(9);
  set_random_grads(params, grads_rng);
  fused.step();
  reference.step();
  nn::StateDict saved = fused.state_dict();
  auto saved_avg = saved.back().second.to(Device::cpu()).to_vector<double>();
  set_random_grads(params, grads_rng);
  fused.step();
  reference.step();
  // The saved tensors did not move with the step.
  BOOST_TEST(saved.back().second.to(Device::cpu()).to_vector<double>() == saved_avg,
             tt::per_element());
  // A fresh fused optimizer loaded from the reference's state continues as the reference does.
  optim::AdamW resumed(device_params(params), 1e-2);
  resumed.load_state_dict(reference.state_dict());
  for (auto& p : params) p.device.detach().copy_(p.host.detach().to(kCuda));
  set_random_grads(params, grads_rng);
  resumed.step();
  reference.step();
  check_params_match(params, "after resuming");
}

BOOST_AUTO_TEST_CASE(bad_input_names_the_optimizer) {
  Tensor on_device = zeros({3}, DType::f32, kCuda);
  on_device.requires_grad_();
  Tensor on_host = zeros({3});
  on_host.requires_grad_();
  KILN_CHECK_THROWS(optim::AdamW({on_device, on_host}, 1e-3), Error, "AdamW", "two devices",
                    "cuda:0", "cpu");
  KILN_CHECK_THROWS(optim::SGD({on_host, on_device}, 1e-3), Error, "SGD", "two devices");

  optim::AdamW adam({on_device}, 1e-3);
  on_device.set_grad(zeros({3}, DType::f64, kCuda));
  KILN_CHECK_THROWS(adam.step(), DTypeError, "AdamW.step", "f32", "f64");
  on_device.set_grad(zeros({3}));
  optim::SGD sgd({on_device}, 1e-3, 0.9);
  KILN_CHECK_THROWS(sgd.step(), Error, "SGD.step", "cuda:0", "cpu");

  // A view with gaps cannot be updated in place by one kernel (nor by kiln's device ops).
  std::mt19937 rng(18);
  ParamPair strided = make_param({{5, 7}, DType::f32, Layout::strided}, rng);
  strided.device.set_grad(zeros({5, 7}, DType::f32, kCuda));
  optim::AdamW adam_strided({strided.device}, 1e-3);
  KILN_CHECK_THROWS(adam_strided.step(), Error, "AdamW.step", "[5, 7]", "gaps", "set_fused");

  Tensor other = zeros({2}, DType::f32, kCuda);
  other.requires_grad_();
  other.set_grad(zeros({2}, DType::f32, kCuda));
  KILN_CHECK_THROWS(optim::clip_grad_norm_tensor_({other, on_device}, 1.0), Error,
                    "clip_grad_norm_", "two devices");
}

BOOST_AUTO_TEST_SUITE_END()
