// What the code generator renders is a fusion rule (graph::KernelCoverage): tril/triu fuse into
// pointwise kernels as index arithmetic (on the vector path, the scalar path and a split launch)
// and into reductions over the trailing dims,
// and an op a reduction kernel cannot render (integer floor division, which reports errors
// through a flag) stays out of it with a reason that names it, while its neighbours fuse.
// References are computed by hand on the host.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "graph/fusion.h"
#include "jit/codegen/kernel_coverage.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/pointwise.h"
#include "jit/codegen/schedule_limits.h"
#include "jit/compile.h"
#include "jit/kernel_plan.h"
#include "support/reference.h"

using namespace kiln;
using graph::FusionKind;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// x * 2 + 1 where the triangle keeps x, 1 elsewhere: by hand over [batches, rows, cols].
std::vector<double> triangle_times_two_plus_one(const std::vector<double>& x, const Shape& shape,
                                                bool lower, std::int64_t diagonal, DType dtype) {
  std::int64_t rows = shape[shape.size() - 2], cols = shape.back();
  std::vector<double> want(x.size());
  for (std::size_t e = 0; e < x.size(); ++e) {
    auto i = static_cast<std::int64_t>(e) / cols % rows, j = static_cast<std::int64_t>(e) % cols;
    bool keep = lower ? j - i <= diagonal : j - i >= diagonal;
    want[e] = test::round_to(dtype, (keep ? x[e] : 0.0) * 2 + 1);
  }
  return want;
}

// Pointwise kernels the plan of `f`'s first entry launches.
template <typename F>
int kernels_of(const F& f) {
  const jit::KernelPlan* plan = f.core().plan(0);
  BOOST_TEST_REQUIRE(plan != nullptr);
  return plan->kernel_count();
}

jit::codegen::ScheduleLimits vectors_off() {
  jit::codegen::ScheduleLimits limits;
  limits.pointwise_vectors = false;
  return limits;
}
jit::codegen::ScheduleLimits index_limit(std::int64_t limit) {
  jit::codegen::ScheduleLimits limits;
  limits.pointwise_index_limit = limit;
  return limits;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(codegen_coverage)

BOOST_AUTO_TEST_CASE(tril_times_two_plus_one_compiled_on_cuda_is_one_kernel) {
  const Shape shape = {3, 5, 7};
  for (DType dtype : {DType::f32, DType::f16}) {
    Tensor x = test::typed(dtype, test::host_random(105, -4, 4, 11), shape);
    auto xs = x.to_vector<double>();
    auto f = jit::compile([](const Tensor& t) { return tril(t) * 2 + 1; });
    Tensor got = f(x.to(Device::cuda()));
    BOOST_TEST(dtype_name(got.dtype()) == dtype_name(dtype));
    test::check_values(got.to(Device::cpu()), shape,
                       triangle_times_two_plus_one(xs, shape, true, 0, dtype));
    test::check_values(got.to(Device::cpu()), shape, (tril(x) * 2 + 1).to_vector<double>());
    BOOST_TEST(kernels_of(f) == 1, f.explain());
    BOOST_TEST(f.core().fusion(0).launch_count() == 1, f.explain());
  }
}

BOOST_AUTO_TEST_CASE(triu_with_a_diagonal_offset_fuses_on_every_launch_path) {
  const Shape shape = {4, 6, 9};
  auto fn = [](const Tensor& t) { return triu(t, 2) * 2 + 1; };
  for (DType dtype : {DType::f32, DType::f16}) {
    Tensor x = test::typed(dtype, test::host_random(216, -3, 3, 5), shape);
    auto want = triangle_times_two_plus_one(x.to_vector<double>(), shape, false, 2, dtype);
    Tensor xd = x.to(Device::cuda());
    {
      auto f = jit::compile(fn);
      test::check_values(f(xd).to(Device::cpu()), shape, want);  // vectors, then a scalar tail
      BOOST_TEST(kernels_of(f) == 1, f.explain());
    }
    {
      jit::codegen::ScopedScheduleLimits scalar(vectors_off());
      auto f = jit::compile(fn);
      test::check_values(f(xd).to(Device::cpu()), shape, want);
    }
    {
      // Pieces of at most 50 elements: each piece's elements know their place in the whole.
      jit::codegen::ScopedScheduleLimits limit(index_limit(50));
      auto& stats = jit::codegen::launch_stats();
      std::int64_t before = stats.launches;
      auto f = jit::compile(fn);
      test::check_values(f(xd).to(Device::cpu()), shape, want);
      BOOST_TEST(stats.launches - before == 5);  // ceil(216 / 50)
    }
  }
  // A negative diagonal, below the main one, on a transposed (strided) input.
  Tensor x = test::typed(DType::f32, test::host_random(216, -3, 3, 7), {4, 9, 6});
  Tensor xt = transpose(x, 1, 2);
  auto f = jit::compile([](const Tensor& t) { return tril(t, -1) * 2 + 1; });
  Tensor got = f(xt.to(Device::cuda()));
  test::check_values(got.to(Device::cpu()), shape,
                     triangle_times_two_plus_one(xt.contiguous().to_vector<double>(), shape, true,
                                                 -1, DType::f32));
}

BOOST_AUTO_TEST_CASE(eager_tril_and_triu_on_cuda_are_pointwise_kernels) {
  const Shape shape = {2, 3, 4};
  Tensor x = test::typed(DType::i64, test::host_random(24, -9, 9, 3), shape);
  auto xs = x.to_vector<double>();
  Tensor lower = tril(x.to(Device::cuda()), 1), upper = triu(x.to(Device::cuda()), -1);
  std::vector<double> want_lower(24), want_upper(24);
  for (std::size_t e = 0; e < 24; ++e) {
    std::int64_t i = static_cast<std::int64_t>(e) / 4 % 3, j = static_cast<std::int64_t>(e) % 4;
    want_lower[e] = j - i <= 1 ? xs[e] : 0;
    want_upper[e] = j - i >= -1 ? xs[e] : 0;
  }
  test::check_values(lower.to(Device::cpu()), shape, DType::i64, want_lower);
  test::check_values(upper.to(Device::cpu()), shape, DType::i64, want_upper);
}

BOOST_AUTO_TEST_CASE(an_op_a_reduction_cannot_render_is_a_named_boundary_its_neighbours_fuse) {
  // sum((a * 2 + 1) // b, -1) * 3: integer floor division reports a zero divisor through an error
  // flag, which only pointwise kernels take, so it stays out of the reduction kernel.
  auto fn = [](const Tensor& a, const Tensor& b) {
    return sum(floor_divide(a * 2 + 1, b), {-1}) * 3;
  };
  Tensor a = test::i64s({-2, -1, 0, 1, 2, 3}, {2, 3}), b = test::i64s({3, -2, 5, 2, -1, 4}, {2, 3});
  auto f = jit::compile(fn);
  Tensor got = f(a.to(Device::cuda()), b.to(Device::cuda()));
  // By hand, Python's //: -3 // 3 = -1, -1 // -2 = 0, 1 // 5 = 0; 3 // 2 = 1, 5 // -1 = -5,
  // 7 // 4 = 1. Row sums -1 and -3, times 3.
  test::check_values(got.to(Device::cpu()), {2}, DType::i64, {-3, -9});

  const graph::Partition& p = f.core().fusion(0);
  const graph::Graph& g = f.core().graph(0);
  std::string e = f.explain();
  BOOST_TEST_REQUIRE(p.groups.size() == 2u, e);
  BOOST_TEST((p.groups[0].kind == FusionKind::pointwise), e);
  BOOST_TEST(p.groups[0].nodes.size() == 3u, e);  // mul, add, floor_divide
  BOOST_TEST((p.groups[1].kind == FusionKind::reduction), e);
  BOOST_TEST(kernels_of(f) == 2, e);
  BOOST_TEST(f.core().plan(0)->fallback_steps() == 0, e);
  // The edge into the reduction carries the reason, naming the op and its dtype.
  BOOST_TEST_REQUIRE(p.unfused.size() == 1u, e);
  BOOST_TEST(contains(p.unfused[0].reason, "floor_divide (i64) reports errors"),
             p.unfused[0].reason);
  // The same graph without the code generator's coverage is one group: the rule made the cut.
  BOOST_TEST(graph::partition(g).groups.size() == 1u);
  // At f32 floor division reports nothing: one kernel.
  auto ff = jit::compile(fn);
  ff(a.to(DType::f32).to(Device::cuda()), b.to(DType::f32).to(Device::cuda()));
  BOOST_TEST(kernels_of(ff) == 1, ff.explain());
}

BOOST_AUTO_TEST_CASE(a_triangle_joins_a_reduction_over_trailing_dims_only) {
  // tril reads its row and column: a reduction kernel over the trailing dims has them (the
  // element's linear index is row * cols + col); one over the leading dim does not.
  Tensor x = test::typed(DType::f32, test::host_random(48, -2, 2, 9), {3, 4, 4});
  auto xs = x.to_vector<double>();
  auto rows = [](const Tensor& t) { return sum(tril(t) * 2, {-1}); };
  auto f = jit::compile(rows);
  Tensor got = f(x.to(Device::cuda()));
  std::vector<double> want(12, 0.0);
  for (std::size_t e = 0; e < 48; ++e)
    if (e % 4 <= e / 4 % 4) want[e / 4] += static_cast<float>(xs[e] * 2);
  test::check_close(got.to(Device::cpu()), {3, 4}, want, 1e-6, 1e-6);
  BOOST_TEST(kernels_of(f) == 1, f.explain());

  auto leading = [](const Tensor& t) { return sum(tril(t) * 2, {0}); };
  auto g = jit::compile(leading);
  Tensor sums = g(x.to(Device::cuda()));
  std::vector<double> want0(16, 0.0);
  for (std::size_t e = 0; e < 48; ++e)
    if (e % 4 <= e / 4 % 4) want0[e % 16] += static_cast<float>(xs[e] * 2);
  test::check_close(sums.to(Device::cpu()), {4, 4}, want0, 1e-6, 1e-6);
  const graph::Partition& p = g.core().fusion(0);
  std::string e = g.explain();
  BOOST_TEST(kernels_of(g) == 2, e);
  bool named = false;
  for (const auto& edge : p.unfused) named = named || contains(edge.reason, "tril reads");
  BOOST_TEST(named, e);
}

BOOST_AUTO_TEST_CASE(the_coverage_names_the_op_and_dtypes) {
  // A one-node graph per case, traced on the CPU: coverage does not depend on the device.
  auto reason = [](auto fn, const Tensor& x, const Tensor& y, FusionKind kind) {
    auto f = jit::compile(fn);
    f(x, y);
    const graph::Graph& g = f.core().graph(0);
    return jit::codegen::kernel_coverage().unrendered_reason(
        g, static_cast<int>(g.nodes.size()) - 1, kind);
  };
  auto rem = [](const Tensor& x, const Tensor& y) { return remainder(x, y); };
  Tensor xi = test::i32s({7}, {1}), yi = test::i32s({2}, {1});
  // Pointwise kernels render integer remainder; reduction kernels take no error flag.
  BOOST_TEST(!reason(rem, xi, yi, FusionKind::pointwise).has_value());
  auto why = reason(rem, xi, yi, FusionKind::reduction);
  BOOST_TEST_REQUIRE(why.has_value());
  BOOST_TEST(contains(*why, "remainder (i32) reports errors"), *why);
  Tensor xf = test::f32s({7}, {1}), yf = test::f32s({2}, {1});
  BOOST_TEST(!reason(rem, xf, yf, FusionKind::pointwise).has_value());
  BOOST_TEST(!reason(rem, xf, yf, FusionKind::reduction).has_value());
}

BOOST_AUTO_TEST_CASE(views_of_computed_values_compile_without_a_caught_error) {
  // Rendering no longer falls back on errors: whatever the fuser groups must render.
  Tensor x = test::typed(DType::f32, test::host_random(24, -2, 2, 13), {2, 3, 4});
  auto xs = x.to_vector<double>();
  auto reshaped = [](const Tensor& t) { return reshape(t * 2, {6, 4}) + 1; };
  auto permuted = [](const Tensor& t) { return transpose(t * 2, 1, 2) + 1; };
  auto summed = [](const Tensor& t) { return sum(reshape(exp(t), {6, 4}), {-1}); };
  Tensor xd = x.to(Device::cuda());
  std::vector<double> twice(24), transposed(24), sums(6, 0.0);
  for (std::size_t e = 0; e < 24; ++e) {
    twice[e] = static_cast<float>(xs[e] * 2 + 1);
    std::size_t b = e / 12, i = e / 4 % 3, j = e % 4;  // [b, i, j] lands at [b, j, i]
    transposed[b * 12 + j * 3 + i] = twice[e];
    sums[e / 4] += std::exp(xs[e]);
  }
  auto f = jit::compile(reshaped);
  test::check_values(f(xd).to(Device::cpu()), {6, 4}, twice);
  // A pointwise kernel reshapes a value it computes by index: the product is never written.
  BOOST_TEST(kernels_of(f) == 1, f.explain());
  test::check_values(jit::compile(permuted)(xd).to(Device::cpu()), {2, 4, 3}, transposed);
  test::check_close(jit::compile(summed)(xd).to(Device::cpu()), {6}, sums, 1e-5, 1e-5);
}

BOOST_AUTO_TEST_CASE(a_kernel_writes_each_value_in_its_own_rank) {
  // y * 2 + 1 is [4]; its maximum with a [1, 1] value is [1, 4]: one kernel writes both.
  auto fn = [](const Tensor& y, const Tensor& z) {
    Tensor h = y * 2 + 1;
    return std::vector<Tensor>{maximum(h, z), h};
  };
  Tensor y = test::f32s({-1, 0, 1, 2}, {4}), z = test::f32s({1.5}, {1, 1});
  auto f = jit::compile(fn);
  auto got = f(y.to(Device::cuda()), z.to(Device::cuda()));
  BOOST_TEST(kernels_of(f) == 1, f.explain());
  test::check_values(got[0].to(Device::cpu()), {1, 4}, {1.5, 1.5, 3, 5});
  test::check_values(got[1].to(Device::cpu()), {4}, {-1, 1, 3, 5});
}

BOOST_AUTO_TEST_SUITE_END()
