// Schedules as values: schedule_reduction and schedule_pointwise decide a launch from the kernel,
// the call's sizes, strides and addresses, the device and the limits, and nothing else; a
// reduction's variants are rendered when a launch first takes one; KILN_LOG=kernels says which
// schedule each kernel took and why. The expectations are worked out by hand from the rules in
// reduction_schedule.h and pointwise_layout.h.
#include <boost/test/unit_test.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "graph/fusion.h"
#include "jit/codegen/attention.h"
#include "jit/codegen/kernel_variants.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/pointwise.h"
#include "jit/codegen/pointwise_schedule.h"
#include "jit/codegen/reduction.h"
#include "jit/codegen/schedule_limits.h"
#include "jit/compile.h"
#include "runtime/log.h"
#include "support/capture_output.h"
#include "support/device_compare.h"
#include "support/reference.h"
#include "support/scoped_env.h"

using namespace kiln;
namespace codegen = kiln::jit::codegen;
using codegen::ReductionForm;
using codegen::ReductionLayout;

namespace {

struct Traced {
  graph::Graph graph;
  graph::FusionGroup group;
};

// The one launching group of `fn`'s trace at `x`.
Traced trace(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x) {
  auto f = jit::compile([&](const Tensor& a) { return fn(a); });
  f(x);
  Traced t;
  t.graph = f.core().graph(0);
  for (const auto& g : graph::partition(t.graph).groups)
    if (g.launches()) t.group = g;
  return t;
}

// A call over a [rows, cols] domain reducing dim 1 (or dim 0 with `over_rows`), every read with
// `strides` and starting at `address`, f32.
struct Call {
  std::vector<std::int64_t> domain;
  std::vector<int> kept, reduced;
  std::vector<long long> read_strides, out_strides;
  std::vector<codegen::TensorAccess> reads, writes;
  codegen::ReductionGeometry geometry() const {
    long long rows = 1, cols = 1;
    for (int d : kept) rows *= domain[d];
    for (int d : reduced) cols *= domain[d];
    return {domain, kept, reduced, rows, cols, read_strides, out_strides, reads, writes};
  }
};

Call call_of(const codegen::ReductionKernel& k, std::int64_t rows, std::int64_t cols,
             std::vector<long long> strides, std::uintptr_t address = 256, bool over_rows = false) {
  Call c;
  c.domain = {rows, cols};
  c.kept = {over_rows ? 1 : 0};
  c.reduced = {over_rows ? 0 : 1};
  for (std::size_t i = 0; i < std::max<std::size_t>(1, k.reads.size()); ++i)
    c.read_strides.insert(c.read_strides.end(), strides.begin(), strides.end());
  c.out_strides = {cols, 1};
  c.reads.assign(k.reads.size(), {address, 4});
  c.writes.assign(k.writes.size(), {256, 4});
  return c;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(codegen_schedule)

BOOST_AUTO_TEST_CASE(a_reduction_schedule_follows_the_call_not_the_trace) {
  Tensor x = randn({64, 512});
  Traced t = trace([](const Tensor& a) { return softmax(a, 1); }, x);
  codegen::ReductionKernel k = codegen::render_reduction(t.graph, t.group);
  const codegen::ScheduleLimits defaults;
  // 4096 contiguous, aligned rows of 512 f32 columns on 132 SMs: a warp a row (32 lanes), 8 rows
  // a block of 256, 4096 / 8 = 512 blocks (under 132 * 16), 4 columns a 16-byte access.
  auto s =
      codegen::schedule_reduction(k, call_of(k, 4096, 512, {512, 1}).geometry(), 132, defaults);
  BOOST_TEST((s.variant.form == ReductionForm::warp_per_row));
  BOOST_TEST((s.variant.layout == ReductionLayout::vector));
  BOOST_TEST(s.grid_x == 512u);
  BOOST_TEST(s.block_x == 256u);
  BOOST_TEST(s.splits == 1);
  // The same rows a float past 16-byte alignment: flat; 2000 columns: a block of 256 a row, and
  // 2000 is a multiple of 4 (vector); 1030 columns: not (flat).
  s = codegen::schedule_reduction(k, call_of(k, 4096, 512, {512, 1}, 260).geometry(), 132,
                                  defaults);
  BOOST_TEST((s.variant.layout == ReductionLayout::flat));
  s = codegen::schedule_reduction(k, call_of(k, 4096, 2000, {2000, 1}).geometry(), 132, defaults);
  BOOST_TEST((s.variant.form == ReductionForm::block_per_row));
  BOOST_TEST((s.variant.layout == ReductionLayout::vector));
  BOOST_TEST(s.block_x == 256u);
  BOOST_TEST(s.grid_x == 132u * 16u);
  s = codegen::schedule_reduction(k, call_of(k, 4096, 1030, {1030, 1}).geometry(), 132, defaults);
  BOOST_TEST((s.variant.layout == ReductionLayout::flat));
  // Rows stepping 2 elements a column (a strided view): generic.
  s = codegen::schedule_reduction(k, call_of(k, 64, 512, {1024, 2}).geometry(), 132, defaults);
  BOOST_TEST((s.variant.layout == ReductionLayout::generic));
  // The limits narrow it: no vectors, no warps.
  codegen::ScheduleLimits narrow;
  narrow.reduction_layout = ReductionLayout::flat;
  narrow.warp_rows = false;
  s = codegen::schedule_reduction(k, call_of(k, 4096, 512, {512, 1}).geometry(), 132, narrow);
  BOOST_TEST((s.variant.form == ReductionForm::block_per_row));
  BOOST_TEST((s.variant.layout == ReductionLayout::flat));
}

BOOST_AUTO_TEST_CASE(few_long_rows_split_and_outer_sums_read_rows_side_by_side) {
  Tensor x = randn({4, 40});
  Traced t = trace([](const Tensor& a) { return sum(a, {1}); }, x);
  codegen::ReductionKernel k = codegen::render_reduction(t.graph, t.group);
  BOOST_TEST_REQUIRE(k.splittable);
  // 4 rows of 2^20 columns, a block of 1024: by work 2^20 / (1024 * 32) = 32 blocks a row, by
  // device ceil(132 / 4) = 33: 32.
  std::vector<std::string> why;
  auto s = codegen::schedule_reduction(k, call_of(k, 4, 1 << 20, {1 << 20, 1}).geometry(), 132, {},
                                       &why);
  BOOST_TEST(s.splits == 32);
  BOOST_TEST(s.grid_y == 32u);
  BOOST_TEST(s.chunk_cols == (1 << 20) / 32);
  std::string text;
  for (const auto& line : why) text += line + "\n";
  BOOST_TEST(text.find("split") != std::string::npos, text);
  BOOST_TEST(text.find("layout vector") != std::string::npos, text);

  // A sum over the batch of [64, 4224] contiguous: each kept column is a row, contiguous along
  // the kept dim: the outer schedule, 4 neighbouring rows a lane where aligned.
  Tensor b = randn({64, 4224});
  Traced over = trace([](const Tensor& a) { return sum(a, {0}); }, b);
  codegen::ReductionKernel ko = codegen::render_reduction(over.graph, over.group);
  BOOST_TEST_REQUIRE(ko.outer);
  s = codegen::schedule_reduction(ko, call_of(ko, 64, 4224, {4224, 1}, 256, true).geometry(), 132,
                                  {});
  BOOST_TEST((s.variant.form == ReductionForm::outer_vector));
  BOOST_TEST(s.block_x == 32u);
  BOOST_TEST(s.block_y == 8u);
  BOOST_TEST(s.grid_x == (4224u / 4 + 31) / 32);
  s = codegen::schedule_reduction(ko, call_of(ko, 64, 4224, {4224, 1}, 260, true).geometry(), 132,
                                  {});
  BOOST_TEST((s.variant.form == ReductionForm::outer));
}

BOOST_AUTO_TEST_CASE(variants_are_rendered_when_first_launched) {
  Tensor x = randn({6, 64});
  Traced t = trace([](const Tensor& a) { return softmax(a, 1); }, x);
  codegen::ReductionKernel k = codegen::render_reduction(t.graph, t.group);
  for (int v = 0; v < codegen::kReductionVariants; ++v) BOOST_TEST(!k.variants.rendered(v));
  std::vector<Tensor> values(t.graph.values.size());
  values[t.graph.inputs.at(0).value] = x.to(Device::cuda());
  Shape domain = {6, 64};
  Tensor y = codegen::run_reduction(t.graph, k, domain, values)[0];
  int rendered = 0;
  for (int v = 0; v < codegen::kReductionVariants; ++v) rendered += k.variants.rendered(v);
  BOOST_TEST(rendered == 1);
  codegen::ReductionVariant taken{ReductionForm::warp_per_row, ReductionLayout::vector};
  BOOST_TEST(k.variants.rendered(taken.index()));
  BOOST_TEST(test::relative_error(y, softmax(x.to(DType::f64), 1)) <= 1e-5);
  // Each variant is its own source; its index round-trips.
  for (int v = 0; v < codegen::kReductionVariants; ++v)
    BOOST_TEST(codegen::ReductionVariant::from_index(v).index() == v);
  BOOST_TEST(codegen::render_reduction_variant(k, {ReductionForm::block_per_row}) !=
             codegen::render_reduction_variant(k, {ReductionForm::warp_per_row}));
  BOOST_CHECK_THROW(codegen::render_reduction_variant(k, {ReductionForm::outer}), Error);
}

BOOST_AUTO_TEST_CASE(a_slot_and_a_name_render_once) {
  int renders = 0;
  codegen::KernelVariants variants("k_test", 3);
  auto make = [&] {
    ++renders;
    return codegen::KernelHandle("k_test", "extern \"C\" __global__ void k_test() {}");
  };
  const codegen::KernelHandle& a = variants.get(1, make);
  const codegen::KernelHandle& b = codegen::KernelVariants(variants).get(1, make);
  BOOST_TEST(&a == &b);  // copies share the slots
  BOOST_TEST(renders == 1);
  BOOST_CHECK_THROW(variants.get(3, make), Error);
  auto source = [&] {
    ++renders;
    return std::string("extern \"C\" __global__ void k_named_test() {}");
  };
  BOOST_TEST(&codegen::kernel_by_name("k_named_test", source) ==
             &codegen::kernel_by_name("k_named_test", source));
  BOOST_TEST(renders == 2);
}

BOOST_AUTO_TEST_CASE(pointwise_launches_follow_alignment_and_the_index_limit) {
  Tensor x = randn({1000});
  Traced t = trace([](const Tensor& a) { return relu(a) * 2.0; }, x);
  codegen::PointwiseKernel k = codegen::render_pointwise(t.graph, t.group);
  codegen::IterSpace space;
  space.sizes = {1000};
  space.strides = {{1}};
  std::vector<codegen::TensorAccess> reads = {{256, 4}}, writes = {{512, 4}};
  auto s = codegen::schedule_pointwise(k, space, reads, writes, {});
  BOOST_TEST_REQUIRE(s.launches.size() == 1u);
  BOOST_TEST(s.launches[0].vectors == 1000 / 4);
  // One float off alignment: no vectors.
  reads[0].address = 260;
  s = codegen::schedule_pointwise(k, space, reads, writes, {});
  BOOST_TEST(s.launches.at(0).vectors == 0);
  // An index limit of 300: runs of at most 300 elements, each starting where the last ended.
  codegen::ScheduleLimits limits;
  limits.pointwise_index_limit = 300;
  reads[0].address = 256;
  s = codegen::schedule_pointwise(k, space, reads, writes, limits);
  BOOST_TEST_REQUIRE(s.launches.size() == 4u);
  BOOST_TEST(s.launches[1].piece.first == 300);
  BOOST_TEST(s.launches[1].reads[0].address == 256u + 300u * 4u);
  BOOST_TEST(s.launches[3].writes[0].address == 512u + 900u * 4u);
}

BOOST_AUTO_TEST_CASE(scoped_limits_come_back_after_a_throw) {
  const codegen::ScheduleLimits defaults;
  try {
    codegen::ScheduleLimits narrow;
    narrow.pointwise_vectors = false;
    narrow.reduction_layout = ReductionLayout::generic;
    codegen::ScopedScheduleLimits scope(narrow);
    BOOST_TEST(!codegen::schedule_limits().pointwise_vectors);
    throw std::runtime_error("an assertion failed");
  } catch (const std::runtime_error&) {
  }
  BOOST_TEST(codegen::schedule_limits().pointwise_vectors == defaults.pointwise_vectors);
  BOOST_TEST((codegen::schedule_limits().reduction_layout == defaults.reduction_layout));
}

BOOST_AUTO_TEST_CASE(kiln_log_kernels_names_each_schedule_and_why) {
  std::string text;
  {
    test::ScopedEnv log("KILN_LOG", "kernels");
    reload_log_settings();
    text = test::capture_output(2, [] {
      auto f = jit::compile([](const Tensor& a) { return softmax(a * 3.0, 1) + 1.0; });
      f(randn({37, 96}).to(Device::cuda())).to(Device::cpu());
    });
  }
  reload_log_settings();
  BOOST_TEST(
      text.find("expected schedule warp_per_row/vector at the traced sizes") != std::string::npos,
      text);
  BOOST_TEST(text.find("schedule warp_per_row/vector, grid") != std::string::npos, text);
  BOOST_TEST(text.find("warp_per_row: 96 columns, 32 lanes a row") != std::string::npos, text);
  BOOST_TEST(text.find("layout vector: rows contiguous and aligned") != std::string::npos, text);
}

BOOST_AUTO_TEST_CASE(kiln_log_kernels_names_gemm_and_attention_schedules) {
  std::string text;
  {
    test::ScopedEnv log("KILN_LOG", "kernels");
    reload_log_settings();
    text = test::capture_output(2, [] {
      // A last dim with stride 2 is neither row- nor column-major: cuBLASLt's rules refuse it and
      // the generated GEMM takes the call, on tensor cores, its a operand's rows strided.
      Tensor a = randn({24, 96}).to(DType::bf16).to(Device::cuda()).slice(1, 0, 96, 2);
      Tensor b = randn({48, 40}).to(DType::bf16).to(Device::cuda());
      matmul(a, b).to(Device::cpu());
      // Head dim 48 (padded to 48): a forward kernel of its own, rendered here first.
      Tensor q = randn({1, 1, 20, 48}).to(DType::bf16).to(Device::cuda());
      Tensor k = randn({1, 1, 30, 48}).to(DType::bf16).to(Device::cuda());
      codegen::AttentionCall call{q, k, k, std::nullopt, 0.125, false};
      codegen::attention_forward(call).out.to(Device::cpu());
    });
  }
  reload_log_settings();
  BOOST_TEST(text.find("schedule tensor-core (mma.m16n8k16) tiles of 64x64x32") != std::string::npos,
             text);
  BOOST_TEST(text.find("an operand's rows are strided or not 16-byte aligned") != std::string::npos,
             text);
  BOOST_TEST(text.find("warps (16 rows each), streamed") != std::string::npos, text);
}

BOOST_AUTO_TEST_CASE(a_warm_attention_launch_looks_nothing_up_by_name) {
  // Head dim 24 (padded to 32): kernels no other case of this suite resolves. The first calls
  // find them by name; later calls by their variant alone.
  Tensor q = randn({1, 2, 20, 24}).to(DType::bf16).to(Device::cuda());
  Tensor k = randn({1, 2, 30, 24}).to(DType::bf16).to(Device::cuda());
  Tensor dout = randn({1, 2, 20, 24}).to(DType::bf16).to(Device::cuda());
  codegen::AttentionCall call{q, k, k, std::nullopt, 0.2, true};
  auto& lookups = codegen::launch_stats().named_lookups;
  std::int64_t cold = lookups.load();
  auto fwd = codegen::attention_forward(call);
  auto grads = codegen::attention_backward(call, fwd.out, fwd.lse, dout);
  BOOST_TEST(lookups.load() - cold == 2);  // the forward's kernel and the backward's
  std::int64_t warm = lookups.load();
  for (int i = 0; i < 3; ++i) {
    auto again = codegen::attention_forward(call);
    codegen::attention_backward(call, again.out, again.lse, dout);
    BOOST_TEST(test::relative_error(again.out, fwd.out) == 0.0);
  }
  BOOST_TEST(lookups.load() == warm);
  BOOST_TEST(grads.dq.defined());
}

BOOST_AUTO_TEST_SUITE_END()
