// A KernelPlan's typed steps (jit/plan_step.h), as its build phases decide them: a matmul with
// bias and GELU is one library step absorbing the epilogue kernel's step; a weight gradient's
// library call absorbs the bias gradient's column sum, which runs right after it; attention
// steps carry their output placement, and the cat a placed backward makes is a step that
// knows it. Results against the CPU in f64.
#include <boost/test/unit_test.hpp>

#include <string>

#include "autograd/ops.h"
#include "jit/aot/aot_program.h"
#include "jit/codegen/epilogue_lowering.h"
#include "jit/codegen/launch_stats.h"
#include "jit/compile.h"
#include "jit/kernel_plan.h"
#include "runtime/cuda/host_sync.h"
#include "runtime/cuda/pinned_staging.h"
#include "support/autograd_leaves.h"
#include "support/device_compare.h"
#include "support/plan_steps.h"

using namespace kiln;
using test::leaf;
using test::relative_error;

namespace {

using test::count_steps;

// The position of the first step of type T, or -1.
template <class T>
int first(const jit::KernelPlan& plan) {
  for (std::size_t i = 0; i < plan.steps().size(); ++i)
    if (plan.steps()[i].as<T>()) return static_cast<int>(i);
  return -1;
}

constexpr std::int64_t kBatch = 2, kLength = 6, kHeads = 2, kHeadDim = 16;
constexpr std::int64_t kWidth = kHeads * kHeadDim;

Tensor heads(const Tensor& qkv, std::int64_t part) {
  return qkv.slice(2, part * kWidth, (part + 1) * kWidth)
      .reshape({kBatch, kLength, kHeads, kHeadDim})
      .transpose(1, 2);
}

// Causal self-attention with one projection to q, k, v and the heads merged back.
Tensor attention_block(const Tensor& x, const Tensor& w) {
  Tensor qkv = matmul(x, w);
  Tensor o = scaled_dot_product_attention(heads(qkv, 0), heads(qkv, 1), heads(qkv, 2), {}, true);
  return o.transpose(1, 2).reshape({kBatch, kLength, kWidth});
}

}  // namespace

BOOST_AUTO_TEST_SUITE(plan_steps)

BOOST_AUTO_TEST_CASE(matmul_bias_gelu_is_one_library_step_absorbing_the_epilogue) {
  auto fn = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    return gelu(matmul(x, w.transpose(0, 1)) + b, GeluApproximation::tanh);
  };
  auto f = jit::compile(fn);
  Tensor x0 = randn({4, 16}), w0 = randn({8, 16}), b0 = randn({8});
  Tensor got = f(x0.to(Device::cuda()), w0.to(Device::cuda()), b0.to(Device::cuda()));
  Tensor want = fn(x0.to(DType::f64), w0.to(DType::f64), b0.to(DType::f64));
  BOOST_TEST(relative_error(got, want) <= 1e-5);

  const jit::KernelPlan* plan = f.core().plan(0);
  BOOST_TEST_REQUIRE(plan != nullptr);
  BOOST_TEST(count_steps<jit::LibraryStep>(*plan) == 1, plan->str());
  const auto& steps = plan->steps();
  int at = first<jit::LibraryStep>(*plan);
  BOOST_TEST_REQUIRE(at >= 0);
  const jit::LibraryStep& library = *steps[at].as<jit::LibraryStep>();
  BOOST_TEST(library.lowering->epilogue == CUBLASLT_EPILOGUE_GELU_BIAS);
  BOOST_TEST(library.lowering->matmul_group == steps[at].group);
  // The epilogue's pointwise group: a kernel step after the call, which it skips.
  BOOST_TEST_REQUIRE(library.absorbs.size() == 1u);
  BOOST_TEST_REQUIRE(library.absorbs[0] > at);
  const jit::PlanStep& absorbed = steps[library.absorbs[0]];
  BOOST_TEST(absorbed.as<jit::KernelStep>() != nullptr);
  BOOST_TEST(absorbed.group == library.lowering->epilogue_group);
  BOOST_TEST(absorbed.note.find("computed by the cuBLASLt epilogue") != std::string::npos);
  // The weight's transpose is a host view; nothing falls back; no kernel launches.
  BOOST_TEST(count_steps<jit::HostViewStep>(*plan) == 1, plan->str());
  BOOST_TEST(plan->fallback_steps() == 0);
  BOOST_TEST(plan->kernel_count() == 0);
  BOOST_TEST(plan->kernel_steps() == 2);
  BOOST_TEST(plan->str().find("library cuBLASLt GELU_BIAS") != std::string::npos, plan->str());
}

BOOST_AUTO_TEST_CASE(a_weight_gradients_call_absorbs_the_bias_gradient_that_runs_after_it) {
  auto fn = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    return matmul(x, w.transpose(0, 1)) + b;
  };
  auto f = jit::compile(fn);
  Tensor x0 = randn({3, 4, 16}), w0 = randn({8, 16}), b0 = randn({8}), gy = randn({3, 4, 8});
  Tensor xd = leaf(x0, DType::f32, Device::cuda()), wd = leaf(w0, DType::f32, Device::cuda()),
         bd = leaf(b0, DType::f32, Device::cuda());
  f(xd, wd, bd).backward(gy.to(Device::cuda()));
  Tensor x = leaf(x0, DType::f64, Device::cpu()), w = leaf(w0, DType::f64, Device::cpu()),
         b = leaf(b0, DType::f64, Device::cpu());
  fn(x, w, b).backward(gy.to(DType::f64));
  BOOST_TEST(relative_error(bd.grad(), b.grad()) <= 5e-5);
  BOOST_TEST(relative_error(wd.grad(), w.grad()) <= 5e-5);

  const jit::KernelPlan& plan = f.core().aot(0)->backward_plan();
  const auto& steps = plan.steps();
  int bgradb = -1;
  for (std::size_t i = 0; i < steps.size(); ++i)
    if (const auto* l = steps[i].as<jit::LibraryStep>())
      if (l->lowering->epilogue == CUBLASLT_EPILOGUE_BGRADB) bgradb = static_cast<int>(i);
  BOOST_TEST_REQUIRE(bgradb >= 0, plan.str());
  const jit::LibraryStep& library = *steps[bgradb].as<jit::LibraryStep>();
  // The column sum: a kernel step placed after the call, with only host views between.
  BOOST_TEST_REQUIRE(library.absorbs.size() == 1u);
  BOOST_TEST_REQUIRE(library.absorbs[0] > bgradb);
  BOOST_TEST(steps[library.absorbs[0]].as<jit::KernelStep>() != nullptr);
  for (int i = bgradb + 1; i < library.absorbs[0]; ++i)
    BOOST_TEST(steps[i].as<jit::HostViewStep>() != nullptr, plan.str());
  BOOST_TEST(plan.kernel_count() == 0, plan.str());
}

BOOST_AUTO_TEST_CASE(an_autocast_weight_gradients_call_also_absorbs_the_casts_to_f32) {
  // f32 parameters cast to bf16 (autocast's linear): the first layer's weight and bias
  // gradients are the bf16 product dhᵀ x and column sum of dh (dh a matmul's product, so its
  // sum is a kernel of its own), each cast to f32. One BGRADB call writes both in f32 (D's
  // type), absorbing the sum's kernel and the product's cast kernel.
  auto fn = [](const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
               const Tensor& g) {
    auto lin = [](const Tensor& a, const Tensor& w) {
      return matmul(a, cast(w, DType::bf16).transpose(0, 1));
    };
    Tensor h = lin(cast(x, DType::bf16), w1) + cast(b1, DType::bf16);
    return sum(cast(lin(h, w2), DType::f32) * g);
  };
  auto f = jit::compile(fn);
  // Small integers: every bf16 operand and product is exact, and the gradients (sums of 12 rows,
  // up to a few thousand) are exact in f32 but not in bf16's 8 bits.
  auto ints = [](Shape shape) { return randint(-3, 4, shape).to(DType::f32); };
  Tensor x0 = ints({3, 4, 16}), w10 = ints({8, 16}), b10 = ints({8}), w20 = ints({5, 8}),
         g0 = ints({3, 4, 5});
  Tensor w1 = leaf(w10, DType::f32, Device::cuda()), b1 = leaf(b10, DType::f32, Device::cuda());
  f(x0.to(Device::cuda()), w1, b1, w20.to(Device::cuda()), g0.to(Device::cuda())).backward();

  const jit::KernelPlan& plan = f.core().aot(0)->backward_plan();
  const auto& steps = plan.steps();
  const jit::LibraryStep* library = nullptr;
  for (const auto& step : steps)
    if (const auto* l = step.as<jit::LibraryStep>())
      if (l->lowering->epilogue == CUBLASLT_EPILOGUE_BGRADB) library = l;
  BOOST_TEST_REQUIRE(library != nullptr, plan.str());
  BOOST_TEST_REQUIRE(library->absorbs.size() == 2u, plan.str());
  for (int absorbed : library->absorbs)
    BOOST_TEST(steps[absorbed].as<jit::KernelStep>() != nullptr, plan.str());
  BOOST_TEST((library->lowering->out_dtype == DType::f32));
  // dh = g @ w2 and the sums, exactly, in f64.
  Tensor dh = matmul(g0.to(DType::f64).reshape({12, 5}), w20.to(DType::f64));
  Tensor x = x0.to(DType::f64).reshape({12, 16});
  BOOST_TEST(relative_error(w1.grad(), matmul(dh.transpose(0, 1), x)) == 0.0);
  BOOST_TEST(relative_error(b1.grad(), sum(dh, {0})) == 0.0);
}

BOOST_AUTO_TEST_CASE(attention_steps_carry_their_output_placement) {
  Tensor x0 = randn({kBatch, kLength, kWidth}), w0 = randn({kWidth, 3 * kWidth}) * 0.3;
  auto f = jit::compile([](const Tensor& a, const Tensor& b) { return attention_block(a, b); });
  Tensor xc = leaf(x0, DType::f32, Device::cuda()), wc = leaf(w0, DType::f32, Device::cuda());
  Tensor got = f(xc, wc);
  got.sum().backward();
  Tensor x = leaf(x0, DType::f64, Device::cpu()), w = leaf(w0, DType::f64, Device::cpu());
  attention_block(x, w).sum().backward();
  BOOST_TEST(relative_error(got, attention_block(x, w)) <= 1e-4);
  BOOST_TEST(relative_error(wc.grad(), w.grad()) <= 1e-4);

  // The forward writes o in the layout of the permute that merges its heads.
  const jit::KernelPlan& forward = f.core().aot(0)->forward_plan();
  int fa = first<jit::AttentionStep>(forward);
  BOOST_TEST_REQUIRE(fa >= 0, forward.str());
  const auto& placed = forward.steps()[fa].as<jit::AttentionStep>()->placement;
  BOOST_TEST_REQUIRE(placed.has_value(), forward.str());
  BOOST_TEST(placed->cat_node < 0);
  BOOST_TEST(!placed->perms[0].empty());

  // The backward writes dq, dk, dv into the cat's slices: the cat's step, after it, knows.
  const jit::KernelPlan& backward = f.core().aot(0)->backward_plan();
  int ba = first<jit::AttentionStep>(backward);
  BOOST_TEST_REQUIRE(ba >= 0, backward.str());
  const auto& joined = backward.steps()[ba].as<jit::AttentionStep>()->placement;
  BOOST_TEST_REQUIRE(joined.has_value(), backward.str());
  BOOST_TEST_REQUIRE(joined->cat_node >= 0);
  int cat_value = f.core().aot(0)->partition().backward.nodes[joined->cat_node].output();
  int cat = -1;
  for (std::size_t i = 0; i < backward.steps().size(); ++i)
    if (const auto* e = backward.steps()[i].as<jit::EagerStep>())
      if (e->placed_value == cat_value) cat = static_cast<int>(i);
  BOOST_TEST(cat > ba, backward.str());
}

// launch_stats() counts every op a warm plan sends through dispatch: none for kernels, host
// views and eager ops, whose nodes hold their kernels.
BOOST_AUTO_TEST_CASE(a_warm_plan_dispatches_only_what_holds_no_kernel) {
  auto& stats = jit::codegen::launch_stats();
  Tensor x = randn({8, 16}).to(Device::cuda());
  // A reshape of an input is a host view, and an index_select an eager op.
  Tensor index = from_vector(std::vector<std::int64_t>{3, 0, 5}, Shape{3}).to(Device::cuda());
  auto with_eager = jit::compile([](const Tensor& a, const Tensor& i) {
    return index_select(a.reshape({16, 8}), 0, i) + 1.0;
  });
  with_eager(x, index);
  const jit::KernelPlan* plan = with_eager.core().plan(0);
  BOOST_REQUIRE(plan);
  int views = 0, eager = 0;
  for (const auto& step : plan->steps()) {
    views += step.as<jit::HostViewStep>() ? 1 : 0;
    eager += step.as<jit::EagerStep>() ? 1 : 0;
  }
  BOOST_TEST_REQUIRE((views >= 1 && eager >= 1), plan->str());
  std::int64_t before = stats.plan_dispatches;
  Tensor warm = with_eager(x, index);
  BOOST_TEST(stats.plan_dispatches - before == 0, plan->str());
  Tensor expected =
      index_select(x.to(Device::cpu()).reshape({16, 8}), 0, index.to(Device::cpu())) + 1.0;
  BOOST_TEST(relative_error(warm, expected) == 0.0);
}

// Each step records what would keep a CUDA graph from capturing it: nothing for a kernel writing
// into the arena, nor for a library call whose output a capture takes from the graph's pool.
BOOST_AUTO_TEST_CASE(steps_record_what_keeps_them_from_capture) {
  Tensor x = randn({8, 16}).to(Device::cuda()), w = randn({16, 16}).to(Device::cuda());
  auto f = jit::compile([](const Tensor& a, const Tensor& b) {
    Tensor h = exp(a) * 2.0;  // a kernel writing into the arena
    return matmul(h, b);      // the plan's output, allocated per call
  });
  Tensor got = f(x, w);
  BOOST_TEST(relative_error(got, matmul(exp(x.to(Device::cpu())) * 2.0, w.to(Device::cpu()))) <=
             1e-5);
  const jit::KernelPlan* plan = f.core().plan(0);
  BOOST_REQUIRE(plan);
  const auto& steps = plan->steps();
  BOOST_TEST_REQUIRE(steps.size() >= 2u, plan->str());
  BOOST_TEST_REQUIRE(steps.front().as<jit::KernelStep>() != nullptr, plan->str());
  for (const auto& s : steps) BOOST_TEST(s.capture_blocker.empty(), plan->str());
  BOOST_TEST(plan->capturable());
  BOOST_TEST(plan->capturable_steps() == static_cast<int>(steps.size()));
}

// A host tensor the function captured is uploaded on every call, with no dispatch for its
// transfer, so that a write into its data that no op records is read too.
BOOST_AUTO_TEST_CASE(a_captured_host_tensor_is_uploaded_on_every_call) {
  auto& stats = jit::codegen::launch_stats();
  Tensor c = randn({8, 16});
  Tensor x = randn({8, 16}).to(Device::cuda());
  auto f = jit::compile([&c](const Tensor& a) { return a * c.to(Device::cuda()) + 1.0; });
  f(x);
  std::int64_t copies = stats.copies_to_device, dispatches = stats.plan_dispatches;
  Tensor warm = f(x);
  BOOST_TEST(stats.copies_to_device - copies == 1);
  BOOST_TEST(stats.plan_dispatches - dispatches == 0);
  BOOST_TEST(relative_error(warm, x.to(Device::cpu()) * c + 1.0) <= 1e-6);
  c.data<float>()[5] += 1.0f;  // no version bump: not an op
  Tensor written = f(x);
  BOOST_TEST(relative_error(written, x.to(Device::cpu()) * c + 1.0) <= 1e-6);
  const jit::KernelPlan* plan = f.core().plan(0);
  BOOST_REQUIRE(plan);
  BOOST_TEST(plan->steps().front().capture_blocker.find("uploads") != std::string::npos,
             plan->str());
  BOOST_TEST(!plan->capturable());
  BOOST_TEST(
      plan->str().find("capture: " + plan->steps().front().capture_blocker) != std::string::npos,
      plan->str());
}

// A number from the host (a 0-dim CPU tensor argument, as an lr or a scale is passed) reaches
// the kernels that read it as an argument: a warm call copies nothing to the device for it.
BOOST_AUTO_TEST_CASE(a_host_number_is_a_kernel_argument_not_an_upload) {
  auto& stats = jit::codegen::launch_stats();
  Tensor x = randn({8, 16});
  Tensor xd = x.to(Device::cuda());
  auto f = jit::compile(
      [](const Tensor& a, const Tensor& scale) { return (a * scale).sum({1}) + scale; });
  f(xd, scalar_tensor(0.5));
  for (double scale : {2.0, -3.0}) {
    const std::int64_t copies = stats.copies_to_device, dispatches = stats.plan_dispatches;
    const std::size_t uploads = cuda::pinned_staging().stats().uploads;
    const std::int64_t pageable = cuda::host_sync_stats().pageable_uploads.load();
    Tensor got = f(xd, scalar_tensor(scale));
    BOOST_TEST(stats.copies_to_device - copies == 0);
    BOOST_TEST(stats.plan_dispatches - dispatches == 0);
    BOOST_TEST(cuda::pinned_staging().stats().uploads == uploads);
    BOOST_TEST(cuda::host_sync_stats().pageable_uploads.load() == pageable);
    BOOST_TEST(relative_error(got, (x.to(DType::f64) * scale).sum({1}) + scale) <= 1e-6);
  }
  BOOST_TEST(f.core().num_entries() == 1u);
}

BOOST_AUTO_TEST_SUITE_END()
