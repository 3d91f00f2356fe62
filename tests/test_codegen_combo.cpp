// Combo kernels (jit/plan_combine.cpp, jit/codegen/combo_kernel.h): independent pointwise kernels
// of a compiled function that can run at the same point launch as ONE kernel, each member over
// its own elements and dtypes. Compiled functions on CUDA tensors against the same functions on
// CPU tensors in f64, with the launches of a warm call counted, and the plan's releases checked:
// no step reads a value an earlier step dropped.
#include <boost/test/unit_test.hpp>

#include <set>
#include <tuple>

#include "autograd/ops.h"
#include "jit/codegen/combo_kernel.h"
#include "jit/codegen/launch_stats.h"
#include "jit/compile.h"
#include "jit/kernel_plan.h"
#include "support/device_compare.h"

using namespace kiln;
using test::relative_error;

namespace {

std::int64_t launches() {
  return jit::codegen::launch_stats().launches.load();
}

Tensor gpu(const Tensor& t) {
  return t.to(Device::cuda());
}
Tensor f64(const Tensor& t) {
  return t.to(DType::f64);
}

const jit::ComboStep* only_combo(const jit::KernelPlan& plan) {
  const jit::ComboStep* found = nullptr;
  for (const auto& s : plan.steps())
    if (const auto* c = s.as<jit::ComboStep>()) {
      BOOST_TEST(found == nullptr, plan.str());
      found = c;
    }
  return found;
}

// Walks the plan as it runs: every value a step reads (a combo's members' included) was made
// by an earlier step or is an input, and none was dropped before.
void check_releases(const graph::Graph& g, const jit::KernelPlan& plan) {
  std::set<int> dropped;
  for (const auto& s : plan.steps()) {
    std::set<int> made;
    for (int n : s.nodes)
      for (int v : g.nodes[n].outputs) made.insert(v);
    for (int n : s.nodes)
      for (int v : g.nodes[n].inputs)
        BOOST_TEST((made.contains(v) || !dropped.contains(v)),
                   "%" << v << " read after it was dropped:\n"
                       << plan.str());
    dropped.insert(s.releases.begin(), s.releases.end());
  }
}

// The function's warm call on CUDA: its generated launches (library calls apart).
template <class F, class... Args>
std::int64_t warm_launches(F& f, const Args&... args) {
  f(args...);
  std::int64_t before = launches();
  f(args...);
  return launches() - before;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(codegen_combo)

// Three casts of different sizes and dtypes, one over several blocks and one of odd size.
BOOST_AUTO_TEST_CASE(independent_casts_are_one_launch) {
  auto fn = [](const Tensor& a, const Tensor& b, const Tensor& c) {
    return std::make_tuple(a.to(DType::bf16), b.to(DType::f16), c.to(DType::f32));
  };
  Tensor a = randn({3, 1000}), b = randn({37}), c = randn({5, 7}).to(DType::f16);
  auto f = jit::compile(fn);
  auto [ga, gb, gc] = f(gpu(a), gpu(b), gpu(c));
  BOOST_TEST((ga.dtype() == DType::bf16));
  BOOST_TEST((gb.dtype() == DType::f16));
  BOOST_TEST((gc.dtype() == DType::f32));
  BOOST_TEST((ga.shape() == a.shape()));
  BOOST_TEST(relative_error(ga, f64(a)) <= 4e-3);  // bf16 rounding
  BOOST_TEST(relative_error(gb, f64(b)) <= 5e-4);  // f16 rounding
  BOOST_TEST(relative_error(gc, f64(c)) == 0.0);   // exact widening
  const jit::KernelPlan* plan = f.core().plan(0);
  BOOST_TEST_REQUIRE(plan != nullptr);
  const jit::ComboStep* combo = only_combo(*plan);
  BOOST_TEST_REQUIRE(combo != nullptr, plan->str());
  BOOST_TEST(combo->members.size() == 3u);
  BOOST_TEST(plan->kernel_count() == 1, plan->str());
  BOOST_TEST(warm_launches(f, gpu(a), gpu(b), gpu(c)) == 1);
}

// An add and a product beside silu.
BOOST_AUTO_TEST_CASE(independent_adds_are_one_launch) {
  auto fn = [](const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& d) {
    return std::make_tuple(a + b, silu(c) * d);  // silu: a member calling a helper function
  };
  Tensor a = randn({300}), b = randn({300}), c = randn({7, 11}), d = randn({7, 11});
  auto f = jit::compile(fn);
  auto [x, y] = f(gpu(a), gpu(b), gpu(c), gpu(d));
  BOOST_TEST(relative_error(x, f64(a) + f64(b)) <= 1e-6);
  BOOST_TEST(relative_error(y, f64(c) * sigmoid(f64(c)) * f64(d)) <= 1e-5);
  BOOST_TEST(warm_launches(f, gpu(a), gpu(b), gpu(c), gpu(d)) == 1);
}

// exp(relu(x) @ w) depends on relu(x) through the matmul: never in one combo with it. The
// independent cast of y joins relu(x) (both ready at the start).
BOOST_AUTO_TEST_CASE(a_dependency_through_a_library_call_forbids_combining) {
  auto fn = [](const Tensor& x, const Tensor& w, const Tensor& y) {
    return std::make_tuple(exp(matmul(relu(x), w)), y.to(DType::bf16));
  };
  Tensor x = randn({8, 16}), w = randn({16, 8}) * 0.2, y = randn({45});
  auto f = jit::compile(fn);
  auto [e, cast] = f(gpu(x), gpu(w), gpu(y));
  BOOST_TEST(relative_error(e, exp(matmul(relu(f64(x)), f64(w)))) <= 1e-5);
  BOOST_TEST(relative_error(cast, f64(y)) <= 4e-3);
  const jit::KernelPlan* plan = f.core().plan(0);
  BOOST_TEST_REQUIRE(plan != nullptr);
  const jit::ComboStep* combo = only_combo(*plan);
  BOOST_TEST_REQUIRE(combo != nullptr, plan->str());
  BOOST_TEST(combo->members.size() == 2u, plan->str());
  // The exp kernel runs alone after the matmul.
  BOOST_TEST(plan->kernel_count() == 2, plan->str());
  BOOST_TEST(warm_launches(f, gpu(x), gpu(w), gpu(y)) == 2);
  check_releases(f.core().graph(0), *plan);
}

// exp(t) waits (moved later) past the matmul that last reads t, to run with the cast of that
// matmul's result: t must stay alive until the combo (the matmul no longer drops it), or the
// combo's outputs could take its block while a member still reads it.
BOOST_AUTO_TEST_CASE(a_deferred_member_keeps_its_input_alive) {
  auto fn = [](const Tensor& x, const Tensor& w, const Tensor& w2) {
    Tensor t = matmul(x, w);
    Tensor e = exp(t);  // traced before the matmul that reads t last
    Tensor u = matmul(t, w2);
    return std::make_tuple(e, u.to(DType::bf16));
  };
  Tensor x = randn({16, 16}) * 0.3, w = randn({16, 16}) * 0.3, w2 = randn({16, 16}) * 0.3;
  auto f = jit::compile(fn);
  auto [e, cast] = f(gpu(x), gpu(w), gpu(w2));
  Tensor t = matmul(f64(x), f64(w));
  BOOST_TEST(relative_error(e, exp(t)) <= 1e-5);
  BOOST_TEST(relative_error(cast, matmul(t, f64(w2))) <= 4e-3);
  const jit::KernelPlan* plan = f.core().plan(0);
  BOOST_TEST_REQUIRE(plan != nullptr);
  BOOST_TEST_REQUIRE(only_combo(*plan) != nullptr, plan->str());
  BOOST_TEST(warm_launches(f, gpu(x), gpu(w), gpu(w2)) == 1);
  check_releases(f.core().graph(0), *plan);
}

// The scale of w2 is traced after the first matmul but reads only an input: it moves earlier to
// run with exp(x), which the first matmul waits for (as the casts of weights under autocast).
BOOST_AUTO_TEST_CASE(a_ready_kernel_moves_earlier_into_the_combo) {
  auto fn = [](const Tensor& x, const Tensor& w1, const Tensor& w2) {
    Tensor m1 = matmul(exp(x), w1);
    Tensor scaled = w2 * 0.5;
    return matmul(m1, scaled);
  };
  Tensor x = randn({8, 12}) * 0.3, w1 = randn({12, 10}) * 0.3, w2 = randn({10, 6});
  auto f = jit::compile(fn);
  Tensor got = f(gpu(x), gpu(w1), gpu(w2));
  BOOST_TEST(relative_error(got, matmul(matmul(exp(f64(x)), f64(w1)), f64(w2) * 0.5)) <= 1e-5);
  const jit::KernelPlan* plan = f.core().plan(0);
  BOOST_TEST_REQUIRE(plan != nullptr);
  const jit::ComboStep* combo = only_combo(*plan);
  BOOST_TEST_REQUIRE(combo != nullptr, plan->str());
  BOOST_TEST(combo->members.size() == 2u, plan->str());
  BOOST_TEST(warm_launches(f, gpu(x), gpu(w1), gpu(w2)) == 1);
  check_releases(f.core().graph(0), *plan);
}

// A non-contiguous input: the combo refuses the call and the members run one by one, correctly.
BOOST_AUTO_TEST_CASE(a_strided_input_runs_the_members_one_by_one) {
  auto fn = [](const Tensor& a, const Tensor& b) {
    return std::make_tuple(a.to(DType::bf16), exp(b));
  };
  Tensor a = randn({6, 10}), b = randn({13});
  auto f = jit::compile(fn);
  f(gpu(a), gpu(b));
  Tensor strided = gpu(randn({10, 6})).transpose(0, 1);
  BOOST_TEST(!strided.is_contiguous());
  auto [x, y] = f(strided, gpu(b));
  BOOST_TEST(relative_error(x, f64(strided.to(Device::cpu()))) <= 4e-3);
  BOOST_TEST(relative_error(y, exp(f64(b))) <= 1e-6);
}

// Past kMaxComboMemberElements a kernel keeps its own launch (and its vector path).
BOOST_AUTO_TEST_CASE(a_large_kernel_keeps_its_own_launch) {
  auto fn = [](const Tensor& a, const Tensor& b, const Tensor& c) {
    return std::make_tuple(a.to(DType::bf16), b.to(DType::bf16), c.to(DType::bf16));
  };
  Tensor a = randn({1025, 1024}), b = randn({40}), c = randn({41});
  BOOST_TEST(a.numel() > jit::codegen::kMaxComboMemberElements);
  auto f = jit::compile(fn);
  auto [x, y, z] = f(gpu(a), gpu(b), gpu(c));
  BOOST_TEST(relative_error(x, f64(a)) <= 4e-3);
  BOOST_TEST(relative_error(y, f64(b)) <= 4e-3);
  BOOST_TEST(relative_error(z, f64(c)) <= 4e-3);
  const jit::KernelPlan* plan = f.core().plan(0);
  BOOST_TEST_REQUIRE(plan != nullptr);
  const jit::ComboStep* combo = only_combo(*plan);
  BOOST_TEST_REQUIRE(combo != nullptr, plan->str());
  BOOST_TEST(combo->members.size() == 2u, plan->str());
  BOOST_TEST(plan->kernel_count() == 2, plan->str());
}

BOOST_AUTO_TEST_SUITE_END()
