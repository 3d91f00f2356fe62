// Index-aware kernels: a cat, pad, slice, select or permute of a value computed in the same
// pointwise kernel is index arithmetic in that kernel (a cat picks its input by range, a pad is a
// masked load, a slice shifts the coordinates its producer is computed at), so rotary embedding
// as a user writes it is one kernel forward and one backward. Each compiled function on the
// (virtual) CUDA device is compared with the same function on the CPU (Eigen reference, f64 for
// gradients), and the kernels it launched are counted.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "graph/fusion.h"
#include "jit/compile.h"
#include "jit/kernel_plan.h"
#include "support/autograd_leaves.h"
#include "support/device_compare.h"
#include "support/launch_counts.h"
#include "support/reference.h"

using namespace kiln;
using test::leaf;
using test::relative_error;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Generated kernels of the plan of `f`'s first entry.
template <typename F>
int kernels_of(const F& f) {
  const jit::KernelPlan* plan = f.core().plan(0);
  BOOST_TEST_REQUIRE(plan != nullptr);
  return plan->kernel_count();
}

Tensor random_cpu(const Shape& shape, std::uint32_t seed, DType dtype = DType::f32) {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return test::typed(dtype, test::host_random(static_cast<std::size_t>(n), -2, 2, seed), shape);
}

// `fn` compiled on the CUDA device against `fn` on the CPU, within `tol`; returns the kernel count.
template <typename Fn, typename... T>
int compare(Fn fn, double tol, const T&... xs) {
  Tensor want = fn(xs...);
  auto f = jit::compile(fn);
  Tensor got = f(xs.to(Device::cuda())...).to(Device::cpu());
  BOOST_TEST(got.shape() == want.shape());
  BOOST_TEST(relative_error(got.to(DType::f64), want.to(DType::f64)) <= tol, f.explain());
  return kernels_of(f);
}

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  std::int64_t d = x.shape().back();
  Tensor x1 = slice(x, -1, 0, d / 2), x2 = slice(x, -1, d / 2, d);
  Tensor rot = cat({-x2, x1}, -1);
  return x * cos + rot * sin;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(codegen_index_fusion)

BOOST_AUTO_TEST_CASE(a_cat_of_computed_values_picks_its_input_by_range) {
  auto fn = [](const Tensor& a, const Tensor& b) {
    return cat({exp(a), b * 2.0, a - 1.0}, 1) + 1.0;
  };
  Tensor a = random_cpu({4, 3}, 1), b = random_cpu({4, 5}, 2);
  BOOST_TEST(compare(fn, 1e-6, a, b) == 1);
  // Along the first dim, with inputs of two dtypes (cat promotes).
  auto rows = [](const Tensor& a, const Tensor& b) { return cat({a * 3.0, b + 0.5}, 0) * 2.0; };
  Tensor c = random_cpu({2, 4}, 3), d = random_cpu({3, 4}, 4, DType::f64);
  BOOST_TEST(compare(rows, 1e-6, c, d) == 1);
}

BOOST_AUTO_TEST_CASE(a_pad_of_a_computed_value_is_a_masked_load_and_negative_pads_crop) {
  auto fn = [](const Tensor& x) { return pad(x * 2.0, {1, 2, -1, 1}, 3.5) - 1.0; };
  Tensor x = random_cpu({3, 4, 5}, 5);
  BOOST_TEST(compare(fn, 1e-6, x) == 1);
}

BOOST_AUTO_TEST_CASE(slices_selects_and_permutes_of_computed_values_shift_their_coordinates) {
  auto sliced = [](const Tensor& x) {
    Tensor y = exp(x);
    return slice(y, 1, 2, 6) + slice(y, 1, 0, 4) * slice(y, 1, 1, 8, 2);
  };
  Tensor x = random_cpu({3, 8}, 6);
  BOOST_TEST(compare(sliced, 1e-6, x) == 1);
  // A slice of a slice of a computed value (a causal mask cut to the sequence).
  auto twice = [](const Tensor& x) {
    return logical_not(slice(slice(gt(x * x, x), 1, 1, 7), 0, 1, 3)).to(DType::f32) * 2.0;
  };
  BOOST_TEST(compare(twice, 0.0, x) == 1);
  // A slice of a slice of an input read by a kernel: two host views, one after the other.
  auto of_input = [](const Tensor& x) { return exp(slice(slice(x, 1, 1, 7), 0, 1, 3)); };
  BOOST_TEST(compare(of_input, 1e-6, x) == 1);
  auto selected = [](const Tensor& x) {
    return select(x * 3.0, 0, 1) + select(transpose(x + 1.0, 0, 1), 0, 2);
  };
  Tensor s = random_cpu({4, 4}, 7);
  BOOST_TEST(compare(selected, 1e-6, s) == 1);
}

BOOST_AUTO_TEST_CASE(rotary_embedding_is_one_kernel_in_f32_and_bf16) {
  Tensor x = random_cpu({2, 3, 8}, 8), cos = random_cpu({3, 8}, 9), sin = random_cpu({3, 8}, 10);
  BOOST_TEST(compare(rope, 1e-6, x, cos, sin) == 1);
  Tensor xb = x.to(DType::bf16), cb = cos.to(DType::bf16), sb = sin.to(DType::bf16);
  BOOST_TEST(compare(rope, 1e-2, xb, cb, sb) == 1);
}

BOOST_AUTO_TEST_CASE(symbolic_sizes_keep_data_movement_in_one_kernel_and_stay_right) {
  // Symbolic sizes: the index-aware kernel takes its extents as arguments, so the slices of
  // computed values stay in it, with the same results at every size.
  auto fn = [](const Tensor& a, const Tensor& b) {
    return slice(exp(a), 1, 1, 3) * slice(b * 2.0, 1, 1, 3);
  };
  auto f = jit::compile(fn);  // the rows that change become symbolic
  for (std::int64_t n : {3, 5, 6, 9}) {
    Tensor a = random_cpu({n, 3}, 30 + static_cast<std::uint32_t>(n)), b = random_cpu({n, 5}, 40);
    Tensor want = fn(a, b);
    Tensor ca = a.to(Device::cuda()), cb = b.to(Device::cuda());
    std::int64_t before = test::launches();
    Tensor got = f(ca, cb);
    BOOST_TEST(test::launches() - before == 1, "n " << n);
    BOOST_TEST(relative_error(got.to(Device::cpu()), want) <= 1e-6, f.explain());
  }
  BOOST_TEST(f.core().num_entries() == 2u);
  BOOST_TEST(f.core().graph(1).str().find("f32[s0, 3]@cuda:0 argument") != std::string::npos,
             f.core().graph(1).str());
}

BOOST_AUTO_TEST_CASE(rotary_embedding_trains_with_one_kernel_forward_and_one_backward) {
  Tensor x0 = random_cpu({2, 4, 16}, 11);
  Tensor cos = random_cpu({4, 16}, 12), sin = random_cpu({4, 16}, 13);
  auto loss = [](const Tensor& x, const Tensor& c, const Tensor& s) { return rope(x, c, s); };
  Tensor x = leaf(x0, DType::f64, Device::cpu());
  Tensor want = loss(x, cos.to(DType::f64), sin.to(DType::f64));
  Tensor seed = random_cpu({2, 4, 16}, 14);
  (want * seed.to(DType::f64)).sum().backward();
  auto f = jit::compile(loss);
  Tensor xd = leaf(x0, DType::f32, Device::cuda());
  Tensor cd = cos.to(Device::cuda()), sd = sin.to(Device::cuda()), gd = seed.to(Device::cuda());
  f(xd, cd, sd).backward(gd);  // the first call compiles
  xd = leaf(x0, DType::f32, Device::cuda());
  std::int64_t before = test::launches();
  Tensor got = f(xd, cd, sd);
  std::int64_t forward = test::launches() - before;
  before = test::launches();
  got.backward(gd);
  std::int64_t backward = test::launches() - before;
  BOOST_TEST_MESSAGE("rope training launches: forward " << forward << ", backward " << backward);
  BOOST_TEST(forward == 1, f.explain());
  BOOST_TEST(backward <= 1, f.explain());
  BOOST_TEST(relative_error(got.to(Device::cpu()).to(DType::f64), want) <= 1e-6);
  BOOST_TEST(relative_error(xd.grad().to(Device::cpu()).to(DType::f64), x.grad()) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(an_expand_of_a_computed_value_stays_cut_with_its_reason) {
  // Broadcasting a computed value would recompute it per element: it is written once instead.
  auto fn = [](const Tensor& x, const Tensor& y) {
    return expand(unsqueeze(exp(x), 0), {3, 4}) * y;
  };
  Tensor x = random_cpu({4}, 15), y = random_cpu({3, 4}, 16);
  Tensor want = fn(x, y);
  auto f = jit::compile(fn);
  Tensor got = f(x.to(Device::cuda()), y.to(Device::cuda())).to(Device::cpu());
  BOOST_TEST(relative_error(got, want) <= 1e-6);
  BOOST_TEST(kernels_of(f) == 2, f.explain());
  BOOST_TEST(contains(f.explain(), "fusing would recompute its producers for every element"),
             f.explain());
}

BOOST_AUTO_TEST_CASE(a_cat_that_computes_nothing_else_stays_a_movement_kernel) {
  // It copies its inputs where they lie (a plan may have their producers write into it).
  auto fn = [](const Tensor& x, const Tensor& y) {
    return cat({slice(x, 1, 1, 3), transpose(y, 0, 1)}, 1);
  };
  Tensor x = random_cpu({3, 4}, 21), y = random_cpu({2, 3}, 22);
  Tensor want = fn(x, y);
  auto f = jit::compile(fn);
  Tensor got = f(x.to(Device::cuda()), y.to(Device::cuda())).to(Device::cpu());
  BOOST_TEST(relative_error(got, want) == 0.0);
  const graph::Partition& p = f.core().fusion(0);
  int movement = 0;
  for (const auto& group : p.groups) movement += group.kind == graph::FusionKind::movement;
  BOOST_TEST(movement == 1, f.explain());
  bool named = false;
  for (const auto& edge : p.unfused)
    named = named || contains(edge.reason, "cat computes nothing else in the kernel");
  BOOST_TEST(named, f.explain());
}

BOOST_AUTO_TEST_CASE(grouped_query_heads_read_by_a_pointwise_kernel_in_training) {
  // k's 2 heads repeated for 4 query heads: an index map where the product reads it.
  auto fn = [](const Tensor& q, const Tensor& k) {
    Tensor rep = reshape(expand(unsqueeze(k, 2), {2, 2, 2, 3, 4}), {2, 4, 3, 4});
    return q * rep + rep;
  };
  Tensor q0 = random_cpu({2, 4, 3, 4}, 17), k0 = random_cpu({2, 2, 3, 4}, 18);
  Tensor seed = random_cpu({2, 4, 3, 4}, 19);
  Tensor q = leaf(q0, DType::f64, Device::cpu()), k = leaf(k0, DType::f64, Device::cpu());
  Tensor want = fn(q, k);
  want.backward(seed.to(DType::f64));
  auto f = jit::compile(fn);
  Tensor qd = leaf(q0, DType::f32, Device::cuda()), kd = leaf(k0, DType::f32, Device::cuda());
  Tensor gd = seed.to(Device::cuda());
  f(qd, kd).backward(gd);
  qd = leaf(q0, DType::f32, Device::cuda());
  kd = leaf(k0, DType::f32, Device::cuda());
  std::int64_t before = test::launches();
  Tensor got = f(qd, kd);
  std::int64_t forward = test::launches() - before;
  before = test::launches();
  got.backward(gd);
  std::int64_t backward = test::launches() - before;
  BOOST_TEST_MESSAGE("gqa training launches: forward " << forward << ", backward " << backward);
  BOOST_TEST(relative_error(got.to(Device::cpu()).to(DType::f64), want) <= 1e-6);
  BOOST_TEST(relative_error(qd.grad().to(Device::cpu()).to(DType::f64), q.grad()) <= 1e-5);
  BOOST_TEST(relative_error(kd.grad().to(Device::cpu()).to(DType::f64), k.grad()) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(an_upper_triangle_minus_its_row_mean_is_one_reduction_kernel) {
  auto fn = [](const Tensor& x) { return triu(x, 1) - mean(x, {-1}, true); };
  Tensor x = random_cpu({3, 5, 6}, 20);
  BOOST_TEST(compare(fn, 1e-6, x) == 1);
  // In f16 too (the mean accumulates in f32), and with the rows split over two dims.
  BOOST_TEST(compare(fn, 1e-2, x.to(DType::f16)) == 1);
  auto two = [](const Tensor& x) { return tril(x * 2.0, -1) + sum(x, {-2, -1}, true); };
  BOOST_TEST(compare(two, 1e-5, x) == 1);
}

BOOST_AUTO_TEST_SUITE_END()
