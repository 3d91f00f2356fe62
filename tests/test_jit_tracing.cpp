// jit::compile end to end: traced results equal eager results exactly for every op family,
// captured parameters, outputs of several tensors, autograd through compiled functions, and the
// data-dependent operations that cannot be traced.
#include <boost/test/unit_test.hpp>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "jit/compile.h"
#include "runtime/trace_hooks.h"

using namespace kiln;

namespace {

// Bitwise equality of values: the reference executor runs the very same kernels as eager.
bool identical(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         a.to_vector<double>() == b.to_vector<double>();
}

template <typename Fn>
void check_matches_eager(Fn fn, const std::vector<Tensor>& inputs) {
  auto f = jit::compile(fn);
  Tensor eager, traced;
  if constexpr (std::is_invocable_v<Fn, const Tensor&>) {
    eager = fn(inputs[0]);
    traced = f(inputs[0]);
  } else {
    eager = fn(inputs[0], inputs[1]);
    traced = f(inputs[0], inputs[1]);
  }
  BOOST_TEST(identical(eager, traced), "eager " << eager << " traced " << traced);
  BOOST_TEST(f.core().stats().compiles == 1);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(traced_equals_eager)

BOOST_AUTO_TEST_CASE(elementwise_and_broadcasting) {
  Generator g(1);
  Tensor a = randn({3, 1, 4}, DType::f32, &g), b = randn({2, 4}, DType::f32, &g);
  check_matches_eager([](const Tensor& x, const Tensor& y) {
    return where(gt(x, y), exp(x) * sigmoid(y), tanh(x - y) / (abs(y) + 1.0)) + pow(abs(x), 1.5);
  }, {a, b});
  check_matches_eager([](const Tensor& x) { return gelu(x, GeluApproximation::tanh) + silu(x) - erf(x); },
                      {a});
}

BOOST_AUTO_TEST_CASE(reductions_and_views) {
  Generator g(2);
  Tensor a = randn({4, 3, 5}, DType::f64, &g);
  check_matches_eager([](const Tensor& x) {
    Tensor y = x.permute({2, 0, 1}).slice(0, 1, 5, 2).reshape({2, 12});
    return logsumexp(y, {1}) + var(x, {0, 2}).sum() + amax(x, {1}).mean() + prod(x.select(1, 0), {0}).sum();
  }, {a});
}

BOOST_AUTO_TEST_CASE(indexing_matmul_and_composites) {
  Generator g(3);
  Tensor w = randn({6, 4}, DType::f32, &g);
  Tensor idx = from_vector(std::vector<std::int64_t>{5, 0, 2});
  check_matches_eager([](const Tensor& table, const Tensor& i) {
    Tensor e = embedding(table, i);                          // [3, 4]
    Tensor h = layer_norm(matmul(e, table.t()), {6});        // [3, 6]
    Tensor c = cat({h, pad(e, {0, 2})}, 0);                  // [6, 6]
    return cross_entropy(c, from_vector(std::vector<std::int64_t>{0, 1, 2, 3, 4, 5})) +
           gather(softmax(c, 1), 1, unsqueeze(arange(6), 1)).sum() + rms_norm(c, {6}).mean();
  }, {w, idx});
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(compiled_functions)

BOOST_AUTO_TEST_CASE(captured_parameters_follow_in_place_updates) {
  Generator g(4);
  nn::Linear fc(3, 2, true, DType::f64, &g);
  auto f = jit::compile([&](const Tensor& x) { return relu(fc(x)); });
  Tensor x = randn({5, 3}, DType::f64, &g);
  BOOST_TEST(identical(f(x), relu(fc(x))));
  {
    NoGradGuard no_grad;
    fc.weight.mul_(-2.0);  // an optimizer-style update: same tensor, new values
  }
  BOOST_TEST(identical(f(x), relu(fc(x))));
  BOOST_TEST(f.core().num_entries() == 1u);
  BOOST_TEST(f.explain().find("captured") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(vector_tuple_and_pair_outputs) {
  Tensor x = tensor({1, 2, 3});
  auto fv = jit::compile([](const Tensor& t) { return std::vector<Tensor>{t * 2.0, t + 1.0}; });
  auto v = fv(x);
  BOOST_TEST(v.size() == 2u);
  BOOST_TEST(v[1].to_vector<float>() == (std::vector<float>{2, 3, 4}));
  auto ft = jit::compile([](const Tensor& t) { return std::make_tuple(t.sum(), t.max(), t.min()); });
  auto [s, mx, mn] = ft(x);
  BOOST_TEST(s.item() == 6.0);
  BOOST_TEST(mx.item() == 3.0);
  BOOST_TEST(mn.item() == 1.0);
  auto fp = jit::compile([](const Tensor& t, const Tensor& u) { return std::make_pair(u, t - u); });
  auto [first, diff] = fp(x, tensor({1, 1, 1}));
  BOOST_TEST(diff.to_vector<float>() == (std::vector<float>{0, 1, 2}));
  BOOST_TEST(first.to_vector<float>() == (std::vector<float>{1, 1, 1}));
}

BOOST_AUTO_TEST_CASE(gradients_through_a_compiled_function_equal_eager_gradients) {
  Generator g(5);
  Tensor w = randn({3, 3}, DType::f64, &g);
  w.requires_grad_();
  Tensor x = randn({4, 3}, DType::f64, &g);
  auto fn = [&](const Tensor& in) { return log_softmax(tanh(matmul(in, w)), 1).sum(); };
  fn(x).backward();
  Tensor eager_grad = w.grad().clone();
  w.set_grad(Tensor());
  auto f = jit::compile(fn);
  f(x).backward();
  BOOST_TEST(allclose(w.grad(), eager_grad, 1e-12, 1e-12));
}

BOOST_AUTO_TEST_CASE(scalar_arguments_are_baked_and_guarded) {
  jit::CompileOptions options;
  options.name = "scale";
  options.arg_names = {"x", "alpha", "power"};
  auto f = jit::compile(
      [](const Tensor& x, double alpha, int power) { return pow(x, power) * alpha; }, options);
  Tensor x = tensor({1, 2});
  BOOST_TEST(f(x, 3.0, 2).to_vector<float>() == (std::vector<float>{3, 12}));
  BOOST_TEST(f(x, 3.0, 2).to_vector<float>() == (std::vector<float>{3, 12}));
  BOOST_TEST(f(x, 0.5, 3).to_vector<float>() == (std::vector<float>{0.5, 4}));
  BOOST_TEST(f.core().num_entries() == 2u);
  BOOST_TEST(f.core().recompile_reasons().at(0) == "scalar 'alpha' value mismatch: expected 3, actual 0.5");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(not_traceable)

namespace {
bool names(const Error& e, std::initializer_list<const char*> parts) {
  std::string msg = e.what();
  for (const char* p : parts)
    if (msg.find(p) == std::string::npos) return false;
  return true;
}
}  // namespace

BOOST_AUTO_TEST_CASE(reading_values_while_tracing_is_an_error_naming_the_operation) {
  Tensor x = tensor({1, 2, 3});
  auto by_item = jit::compile([](const Tensor& t) { return t * t.sum().item(); });
  BOOST_CHECK_EXCEPTION(by_item(x), NotTraceableError,
                        [](const Error& e) { return names(e, {"item", "not traceable"}); });
  auto by_branch = jit::compile([](const Tensor& t) {
    return t.to_vector<float>()[0] > 0 ? t : -t;
  });
  BOOST_CHECK_EXCEPTION(by_branch(x), NotTraceableError,
                        [](const Error& e) { return names(e, {"to_vector", "[3]"}); });
  auto by_print = jit::compile([](const Tensor& t) { return tensor({static_cast<float>(t.str().size())}); });
  BOOST_CHECK_EXCEPTION(by_print(x), NotTraceableError,
                        [](const Error& e) { return names(e, {"printing"}); });
  // In-place writes trace (they are functionalized: test_jit_inplace), and so do random draws
  // (test_jit_random).
  auto by_inplace = jit::compile([](const Tensor& t) { Tensor u = t * 1.5; u.add_(t); return u; });
  BOOST_TEST(by_inplace(x).to_vector<double>() == (x * 2.5).to_vector<double>());
  // Nothing leaked: eager code still works after the failed traces.
  BOOST_TEST(x.sum().item() == 6.0);
}

BOOST_AUTO_TEST_SUITE_END()
