// Gradient clipping on CUDA tensors (the virtual GPU here): clip_grad_norm_tensor_ against norms
// computed on the host in f64 for p = 2, 1, inf and 3 over gradients of mixed dtypes, in two
// launches; a norm under the limit leaves the gradients bitwise; non-finite gradients and empty
// lists; and a warm clip + fused AdamW + schedule that never waits for the device.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "autograd/lr_scheduler.h"
#include "autograd/optim.h"
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

}  // namespace

// ---- clip_grad_norm_ ----

namespace {

// The p-norm of every gradient element, in f64 on the host (NaN if any element is NaN).
double host_norm(const std::vector<std::vector<double>>& grads, double p) {
  double total = 0;
  bool nan = false;
  for (const auto& g : grads)
    for (double x : g) {
      nan = nan || std::isnan(x);
      if (std::isinf(p))
        total = std::max(total, std::abs(x));
      else
        total += std::pow(std::abs(x), p);
    }
  if (nan) return std::numeric_limits<double>::quiet_NaN();
  return std::isinf(p) ? total : std::pow(total, 1 / p);
}

struct ClipCase {
  std::vector<Tensor> params;
  std::vector<std::vector<double>> grads;  // as stored, in f64
  std::vector<DType> dtypes;
};

ClipCase clip_case(const std::vector<std::pair<Shape, DType>>& specs, std::uint32_t seed) {
  std::mt19937 rng(seed);
  ClipCase c;
  for (const auto& [shape, dtype] : specs) {
    Tensor p = zeros(shape, dtype, kCuda);
    p.requires_grad_();
    auto g = test::round_to(dtype, normal_values(static_cast<std::size_t>(numel(shape)), rng));
    p.set_grad(test::typed(dtype, g, shape).to(kCuda));
    c.params.push_back(p);
    c.grads.push_back(g);
    c.dtypes.push_back(dtype);
  }
  return c;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fused_clipping)

BOOST_AUTO_TEST_CASE(clip_grad_norm_matches_a_host_computation_in_two_launches) {
  std::vector<std::pair<Shape, DType>> specs = {
      {{1}, DType::f32},   {{0}, DType::f32},     {{4097}, DType::f32}, {{33, 5}, DType::bf16},
      {{999}, DType::f16}, {{12000}, DType::f32}, {{2}, DType::bf16}};
  for (double p : {2.0, 1.0, std::numeric_limits<double>::infinity(), 3.0}) {
    BOOST_TEST_CONTEXT("norm_type " << p) {
      ClipCase c = clip_case(specs, 21);
      double want = host_norm(c.grads, p);
      double max_norm = want / 4;  // clips: every gradient scaled by about 1/4
      std::int64_t before = launches();
      Tensor total = optim::clip_grad_norm_tensor_(c.params, max_norm, p);
      BOOST_TEST(launches() - before == 2);
      BOOST_TEST(total.device().is_cuda());
      BOOST_TEST(total.dim() == 0);
      BOOST_TEST(total.item() == want, tt::tolerance(2e-6));
      double coef = max_norm / (want + 1e-6);
      for (std::size_t i = 0; i < c.params.size(); ++i) {
        std::vector<double> scaled = c.grads[i];
        for (auto& x : scaled) x = test::round_to(c.dtypes[i], x * coef);
        BOOST_TEST_CONTEXT("gradient " << i) {
          test::check_close(c.params[i].grad().to(Device::cpu()), c.params[i].grad().shape(),
                            scaled, test::rtol_for(c.dtypes[i]), 1e-7);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_norm_under_the_limit_leaves_gradients_bitwise_and_the_double_api_agrees) {
  ClipCase c = clip_case({{{5000}, DType::f32}, {{17}, DType::bf16}}, 22);
  double want = host_norm(c.grads, 2);
  double got = optim::clip_grad_norm_(c.params, want * 2);  // reads the norm back
  BOOST_TEST(got == want, tt::tolerance(2e-6));
  for (std::size_t i = 0; i < c.params.size(); ++i)
    test::check_values(c.params[i].grad().to(Device::cpu()), c.params[i].grad().shape(),
                       c.grads[i]);
  // Deterministic: the same gradients give the same bits.
  Tensor again = optim::clip_grad_norm_tensor_(c.params, want * 2);
  BOOST_TEST(again.item() == got);
}

BOOST_AUTO_TEST_CASE(non_finite_gradients_and_empty_lists) {
  ClipCase c = clip_case({{{100}, DType::f32}, {{3}, DType::f32}}, 23);
  {
    NoGradGuard no_grad;
    c.params[1].grad().copy_(test::f32s({1.0f, std::nanf(""), 2.0f}).to(kCuda));
  }
  for (double p : {2.0, std::numeric_limits<double>::infinity()}) {
    Tensor total = optim::clip_grad_norm_tensor_(c.params, 1.0, p);
    BOOST_TEST(std::isnan(total.item()));
    // torch's error_if_nonfinite=false: scaled by a NaN coefficient.
    auto g = c.params[0].grad().to(Device::cpu()).to_vector<double>();
    BOOST_TEST(std::isnan(g[0]));
  }
  Tensor none = zeros({3}, DType::f32, kCuda);
  none.requires_grad_();
  Tensor total = optim::clip_grad_norm_tensor_({none}, 1.0);
  BOOST_TEST(total.device().is_cuda());
  BOOST_TEST(total.item() == 0.0);
}

BOOST_AUTO_TEST_CASE(a_warm_clip_and_step_never_wait_for_the_device) {
  // The optimizer half of a training step, warm: clipping (norm kept on the device), AdamW and a
  // schedule make no device-to-host copy, no synchronization, no compile, no kernel lookup, no
  // table upload and no backend allocation (the caching allocator serves the norm's scalar).
  ClipCase c = clip_case({{{300}, DType::f32}, {{7, 7}, DType::f32}, {{40}, DType::bf16}}, 24);
  optim::AdamW opt(c.params, 1e-3);
  optim::StepLR schedule(opt, 1, 0.5);
  auto step = [&] {
    optim::clip_grad_norm_tensor_(c.params, 0.5);
    opt.step();
    schedule.step();
  };
  // Warm: compiled, tables uploaded, and the allocator's cache holding what a step frees (the
  // first steps of a process leave it one block short).
  for (int i = 0; i < 3; ++i) step();
  auto& sync = cuda::host_sync_stats();
  auto& alloc = cuda_allocator();
  std::int64_t compiled = compiles(), looked_up = lookups(), launched = launches();
  std::int64_t uploads = jit::codegen::multi_tensor_table_uploads();
  std::int64_t copies = sync.device_to_host_copies.load(), syncs = sync.synchronizations.load();
  std::size_t backend_allocs = alloc.stats().num_backend_allocs;
  for (int i = 0; i < 2; ++i) step();
  BOOST_TEST(sync.device_to_host_copies.load() - copies == 0);
  BOOST_TEST(sync.synchronizations.load() - syncs == 0);
  BOOST_TEST(compiles() == compiled);
  BOOST_TEST(lookups() == looked_up);
  BOOST_TEST(launches() - launched == 2 * (2 + 2));  // clip: 2; AdamW: one per dtype group
  BOOST_TEST(jit::codegen::multi_tensor_table_uploads() == uploads);
  BOOST_TEST(alloc.stats().num_backend_allocs == backend_allocs);
  // The counters do count: reading the norm is one copy to the host.
  Tensor norm = optim::clip_grad_norm_tensor_(c.params, 0.5);
  copies = sync.device_to_host_copies.load();
  BOOST_TEST(std::isfinite(norm.item()));
  BOOST_TEST(sync.device_to_host_copies.load() - copies == 1);
}

BOOST_AUTO_TEST_SUITE_END()
