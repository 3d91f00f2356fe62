// Engine semantics with hand-computed gradients: .grad accumulation, implicit and explicit
// output gradients, retain_graph, grad mode, detach, views, diamonds, requires_grad_ rules,
// in-place ops (on leaves, under no-grad, on non-leaves, and on tensors saved for backward),
// autograd::grad, create_graph (higher derivatives), non-differentiable outputs and gradient
// dtypes under promotion.
#include <boost/test/unit_test.hpp>

#include <memory>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "runtime/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"

namespace {

using kiln::AutogradError;
using kiln::DType;
using kiln::Tensor;

Tensor leaf(const std::vector<double>& values, const kiln::Shape& shape) {
  Tensor x = kiln::from_vector(values, shape);
  x.requires_grad_();
  return x;
}

Tensor leaf(const std::vector<double>& values) {
  return leaf(values, {static_cast<std::int64_t>(values.size())});
}

std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Runs `fn`, which must throw E; returns the message.
template <typename E, typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  BOOST_ERROR("no exception was thrown");
  return "";
}

std::uint64_t version_of(const Tensor& t) {
  return t.impl().storage->version();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(backward_basics)

BOOST_AUTO_TEST_CASE(implicit_gradient_on_scalar) {
  Tensor x = leaf({1.0, 2.0, 3.0});
  Tensor y = (x * x).sum();  // dy/dx = 2x
  BOOST_TEST(y.requires_grad());
  BOOST_TEST(!y.is_leaf());
  BOOST_TEST(x.is_leaf());
  y.backward();
  std::vector<double> expected = {2.0, 4.0, 6.0};
  BOOST_TEST(values(x.grad()) == expected, boost::test_tools::per_element());
  BOOST_TEST((x.grad().dtype() == DType::f64));
  BOOST_TEST((x.grad().shape() == kiln::Shape{3}));
}

BOOST_AUTO_TEST_CASE(grad_accumulates_across_backward_calls) {
  Tensor x = leaf({1.0, -2.0});
  (x * 3.0).sum().backward();
  (x * x).sum().backward();
  std::vector<double> expected = {3.0 + 2.0, 3.0 - 4.0};
  BOOST_TEST(values(x.grad()) == expected, boost::test_tools::per_element());
  // Clearing .grad starts afresh.
  x.set_grad(Tensor());
  BOOST_TEST(!x.grad().defined());
  (x * 3.0).sum().backward();
  expected = {3.0, 3.0};
  BOOST_TEST(values(x.grad()) == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(non_scalar_without_gradient_is_an_error) {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = x * 2.0;
  std::string msg = error_of<AutogradError>([&] { y.backward(); });
  BOOST_TEST(contains(msg, "[2, 3]"), msg);
  BOOST_TEST(!x.grad().defined());
}

BOOST_AUTO_TEST_CASE(explicit_gradient) {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = x * x;
  Tensor g = kiln::from_vector(std::vector<double>{1, 0, -1, 0.5, 2, 0}, {2, 3});
  y.backward(g);
  std::vector<double> expected = {2, 0, -6, 4, 20, 0};  // 2 x g
  BOOST_TEST(values(x.grad()) == expected, boost::test_tools::per_element());
  // A gradient of the wrong shape is rejected.
  Tensor z = x * 2.0;
  std::string msg = error_of<kiln::ShapeError>([&] { z.backward(kiln::ones({3, 2}, DType::f64)); });
  BOOST_TEST(contains(msg, "[3, 2]"), msg);
}

BOOST_AUTO_TEST_CASE(backward_on_tensor_without_grad_is_an_error) {
  Tensor x = kiln::from_vector(std::vector<double>{1.0, 2.0});
  Tensor y = (x * 2.0).sum();
  BOOST_TEST(!y.requires_grad());
  BOOST_CHECK_THROW(y.backward(), AutogradError);
}

BOOST_AUTO_TEST_CASE(second_backward_without_retain_graph) {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = (x.exp() * x).sum();
  y.backward();
  std::string msg = error_of<AutogradError>([&] { y.backward(); });
  BOOST_TEST(contains(msg, "retain_graph"), msg);
}

BOOST_AUTO_TEST_CASE(retain_graph_allows_a_second_backward) {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = (x * x * x).sum();  // 3 x^2
  y.backward({}, /*retain_graph=*/true);
  std::vector<double> once = {3.0, 12.0};
  BOOST_TEST(values(x.grad()) == once, boost::test_tools::per_element());
  y.backward();
  std::vector<double> twice = {6.0, 24.0};
  BOOST_TEST(values(x.grad()) == twice, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(backward_of_a_leaf_itself) {
  Tensor x = leaf({4.0});
  x.backward();
  BOOST_TEST(x.grad().item() == 1.0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(graph_structure)

BOOST_AUTO_TEST_CASE(no_grad_guard) {
  Tensor x = leaf({1.0, 2.0});
  {
    kiln::NoGradGuard no_grad;
    BOOST_TEST(!kiln::grad_enabled());
    Tensor y = x * 2.0 + x.exp();
    BOOST_TEST(!y.requires_grad());
    BOOST_TEST(y.grad_fn() == nullptr);
    Tensor s = kiln::softmax(x, 0);
    BOOST_TEST(!s.requires_grad());
    {
      kiln::GradModeGuard enable(true);
      BOOST_TEST((x * 2.0).requires_grad());
    }
    BOOST_TEST(!kiln::grad_enabled());
  }
  BOOST_TEST(kiln::grad_enabled());
  BOOST_TEST((x * 2.0).requires_grad());
}

BOOST_AUTO_TEST_CASE(detach_stops_gradient) {
  Tensor x = leaf({1.0, 2.0, 3.0});
  Tensor d = x.detach();
  BOOST_TEST(!d.requires_grad());
  BOOST_TEST(d.is_leaf());
  // y = x * detach(x): the detached factor is a constant, so dy/dx = x.
  (x * d).sum().backward();
  std::vector<double> expected = {1.0, 2.0, 3.0};
  BOOST_TEST(values(x.grad()) == expected, boost::test_tools::per_element());
  // detach shares the data.
  BOOST_TEST(d.raw_data() == x.raw_data());
}

BOOST_AUTO_TEST_CASE(gradient_through_views_lands_in_the_right_elements) {
  // x [2, 3]; x.t() is [3, 2]; rows 1..2 of it are columns 1..2 of x.
  Tensor x = leaf({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor y = x.t().slice(0, 1, 3);  // [[x01, x11], [x02, x12]]
  Tensor w = kiln::from_vector(std::vector<double>{10, 20, 30, 40}, {2, 2});
  (y * w).sum().backward();
  std::vector<double> expected = {0, 10, 30, 0, 20, 40};
  BOOST_TEST(values(x.grad()) == expected, boost::test_tools::per_element());
  BOOST_TEST(x.grad().is_contiguous());

  // A strided slice of a select of a reshape.
  Tensor z = leaf({0, 1, 2, 3, 4, 5, 6, 7}, {8});
  (z.reshape({2, 4}).select(0, 1).slice(0, 0, 4, 2) * 5.0).sum().backward();
  expected = {0, 0, 0, 0, 5, 0, 5, 0};
  BOOST_TEST(values(z.grad()) == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(diamond_sums_gradients) {
  Tensor x = leaf({2.0, -1.0});
  Tensor a = x * 3.0;
  Tensor b = x * x;
  Tensor c = a * b;          // 3 x^3 -> 9 x^2
  (c + a).sum().backward();  // + 3
  std::vector<double> expected = {9.0 * 4.0 + 3.0, 9.0 * 1.0 + 3.0};
  BOOST_TEST(values(x.grad()) == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(requires_grad_rules) {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = x * 2.0;
  std::string msg = error_of<AutogradError>([&] { y.requires_grad_(); });
  BOOST_TEST(contains(msg, "leaf"), msg);
  Tensor i = kiln::arange(4.0);
  msg = error_of<AutogradError>([&] { i.requires_grad_(); });
  BOOST_TEST(contains(msg, "i64"), msg);
  BOOST_TEST(!i.requires_grad());
  // Turning it off again on a leaf is allowed.
  x.requires_grad_(false);
  BOOST_TEST(!(x * 2.0).requires_grad());
}

BOOST_AUTO_TEST_CASE(non_differentiable_outputs_do_not_require_grad) {
  Tensor x = leaf({0.5, -1.0, 2.0, 0.1}, {2, 2});
  Tensor am = kiln::argmax(x, 1);
  BOOST_TEST(!am.requires_grad());
  BOOST_TEST((am.dtype() == DType::i64));
  BOOST_TEST(!x.argmin(0).requires_grad());
  BOOST_TEST(!kiln::gt(x, 0.0).requires_grad());
  BOOST_TEST(!(x == x).requires_grad());
  BOOST_TEST(!(x < 1.0).requires_grad());
  BOOST_TEST(!kiln::logical_not(x > 0.0).requires_grad());
  // A float op of an integer result is a constant.
  Tensor c = kiln::cast(am, DType::f64);
  BOOST_TEST(!c.requires_grad());
}

BOOST_AUTO_TEST_CASE(gradient_dtype_matches_the_leaf) {
  // f32 leaf times an f64 tensor promotes to f64; the gradient comes back as f32.
  Tensor x = kiln::from_vector(std::vector<float>{1.0f, 2.0f});
  x.requires_grad_();
  Tensor y = kiln::from_vector(std::vector<double>{3.0, -4.0});
  Tensor z = x * y;
  BOOST_TEST((z.dtype() == DType::f64));
  z.sum().backward();
  BOOST_TEST((x.grad().dtype() == DType::f32));
  std::vector<double> expected = {3.0, -4.0};
  BOOST_TEST(values(x.grad()) == expected, boost::test_tools::per_element());
  // An explicit cast back and forth.
  Tensor w = kiln::from_vector(std::vector<float>{0.5f, 1.5f});
  w.requires_grad_();
  (w.to(DType::f64) * 2.0).to(DType::f32).sum().backward();
  BOOST_TEST((w.grad().dtype() == DType::f32));
  expected = {2.0, 2.0};
  BOOST_TEST(values(w.grad()) == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(leaf_gradients_do_not_alias) {
  // add passes the same gradient to both inputs; each leaf must own its .grad.
  Tensor x = leaf({1.0, 2.0});
  Tensor y = leaf({3.0, 4.0});
  Tensor g = kiln::from_vector(std::vector<double>{1.0, 1.0});
  (x + y).backward(g);
  BOOST_TEST(x.grad().impl().storage != y.grad().impl().storage);
  BOOST_TEST(x.grad().impl().storage != g.impl().storage);
  x.grad().zero_();
  std::vector<double> ones = {1.0, 1.0};
  BOOST_TEST(values(y.grad()) == ones, boost::test_tools::per_element());
  BOOST_TEST(values(g) == ones, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(composite_graphs_are_freed_with_their_outputs) {
  // A saved output must not keep itself alive through its own grad_fn.
  Tensor x = leaf({0.1, 0.2, 0.3});
  std::weak_ptr<kiln::TensorImpl> out;
  std::weak_ptr<kiln::autograd::Node> node;
  {
    Tensor s = kiln::softmax(x, 0);
    Tensor l = kiln::log_softmax(x, 0);
    out = s.impl_ptr();
    node = s.grad_fn();
    BOOST_TEST(!out.expired());
  }
  BOOST_TEST(out.expired());
  BOOST_TEST(node.expired());
}

BOOST_AUTO_TEST_CASE(gradcheck_reports_a_wrong_gradient) {
  // x * detach(x) has analytical gradient x but numerical gradient 2x.
  auto wrong = [](const std::vector<Tensor>& in) { return in[0] * in[0].detach(); };
  auto result = kiln::autograd::gradcheck(wrong, {leaf({1.0, 2.0})});
  BOOST_TEST(!result.ok);
  BOOST_TEST(contains(result.report, "analytical"), result.report);
  auto right = [](const std::vector<Tensor>& in) { return in[0] * in[0]; };
  BOOST_TEST(kiln::autograd::gradcheck(right, {leaf({1.0, 2.0})}).ok);
  // Finite differences need f64.
  Tensor f = kiln::from_vector(std::vector<float>{1.0f});
  f.requires_grad_();
  BOOST_CHECK_THROW(kiln::autograd::gradcheck(right, {f}), kiln::DTypeError);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(in_place)

BOOST_AUTO_TEST_CASE(in_place_on_a_leaf_that_requires_grad) {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  std::string msg = error_of<AutogradError>([&] { x.add_(kiln::ones({2, 3}, DType::f64)); });
  BOOST_TEST(contains(msg, "add_"), msg);
  BOOST_TEST(contains(msg, "[2, 3]"), msg);
  msg = error_of<AutogradError>([&] { x.mul_(2.0); });
  BOOST_TEST(contains(msg, "mul_"), msg);
  BOOST_TEST(version_of(x) == 0u);
  std::vector<double> unchanged = {1, 2, 3, 4, 5, 6};
  BOOST_TEST(values(x) == unchanged, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(in_place_under_no_grad_updates_a_leaf) {
  // An optimizer step: p -= lr * p.grad.
  Tensor p = leaf({1.0, 2.0});
  (p * p).sum().backward();
  auto v0 = version_of(p);
  {
    kiln::NoGradGuard no_grad;
    p.add_(p.grad(), -0.25);
  }
  BOOST_TEST(version_of(p) == v0 + 1);
  std::vector<double> expected = {0.5, 1.0};
  BOOST_TEST(values(p) == expected, boost::test_tools::per_element());
  BOOST_TEST(p.is_leaf());
  BOOST_TEST(p.requires_grad());
  {
    kiln::NoGradGuard no_grad;
    p.mul_(2.0);
    p.grad().zero_();
  }
  BOOST_TEST(version_of(p) == v0 + 2);
  expected = {1.0, 2.0};
  BOOST_TEST(values(p) == expected, boost::test_tools::per_element());
  // The next step's gradients start from the zeroed .grad.
  (p * 3.0).sum().backward();
  expected = {3.0, 3.0};
  BOOST_TEST(values(p.grad()) == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(modifying_a_saved_leaf_is_detected_at_backward) {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = (x * x).sum();
  {
    kiln::NoGradGuard no_grad;
    x.mul_(2.0);
  }
  std::string msg = error_of<AutogradError>([&] { y.backward(); });
  BOOST_TEST(contains(msg, "modified by an in-place operation"), msg);
}

BOOST_AUTO_TEST_CASE(modifying_a_saved_non_leaf_is_detected_at_backward) {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = x * 2.0;
  Tensor z = (y * y).sum();  // saves y
  y.mul_(3.0);
  std::string msg = error_of<AutogradError>([&] { z.backward(); });
  BOOST_TEST(contains(msg, "modified by an in-place operation"), msg);
  // The same for a composite's saved output (slice and sum save nothing they check).
  Tensor s = kiln::softmax(x, 0);
  Tensor t = s.slice(0, 0, 1).sum();
  s.mul_(2.0);
  msg = error_of<AutogradError>([&] { t.backward(); });
  BOOST_TEST(contains(msg, "modified by an in-place operation"), msg);
}

BOOST_AUTO_TEST_CASE(in_place_after_ops_that_save_no_values) {
  // add and sum read only shapes in backward, so changing x afterwards cannot affect them.
  Tensor x = leaf({1.0, 2.0});
  Tensor z = (x + 1.0).sum();
  {
    kiln::NoGradGuard no_grad;
    x.mul_(2.0);
  }
  z.backward();
  std::vector<double> ones = {1.0, 1.0};
  BOOST_TEST(values(x.grad()) == ones, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(in_place_on_a_view_that_needs_grad) {
  Tensor x = leaf({1.0, 2.0, 3.0, 4.0});
  Tensor y = x * 2.0;
  Tensor v = y.slice(0, 0, 2);
  std::string msg = error_of<AutogradError>([&] { v.mul_(3.0); });
  BOOST_TEST(contains(msg, "view"), msg);
}

BOOST_AUTO_TEST_CASE(in_place_on_a_non_leaf_with_history) {
  Tensor x = leaf({1.0, 2.0, 3.0});
  Tensor y = x * 2.0;
  y.mul_(3.0);
  BOOST_TEST(y.requires_grad());
  std::vector<double> forward = {6.0, 12.0, 18.0};
  BOOST_TEST(values(y) == forward, boost::test_tools::per_element());
  y.sum().backward();
  std::vector<double> expected = {6.0, 6.0, 6.0};
  BOOST_TEST(values(x.grad()) == expected, boost::test_tools::per_element());

  // add_ of a tensor that requires grad gives a plain buffer history.
  Tensor w = leaf({1.0, -1.0, 0.5});
  Tensor buf = kiln::zeros({3}, DType::f64);
  buf.add_(w * w, 2.0);
  BOOST_TEST(buf.requires_grad());
  buf.sum().backward();
  expected = {4.0, -4.0, 2.0};  // 2 * 2w
  BOOST_TEST(values(w.grad()) == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(copy_and_fill_on_non_leaves) {
  Tensor x = leaf({1.0, 2.0});
  Tensor buf = kiln::zeros({2}, DType::f64);
  buf.copy_(x * 4.0);
  BOOST_TEST(buf.requires_grad());
  buf.sum().backward();
  std::vector<double> expected = {4.0, 4.0};
  BOOST_TEST(values(x.grad()) == expected, boost::test_tools::per_element());
  // fill_ replaces the values with constants: no history any more.
  Tensor y = x * 2.0;
  y.fill_(7.0);
  BOOST_TEST(!y.requires_grad());
  std::vector<double> sevens = {7.0, 7.0};
  BOOST_TEST(values(y) == sevens, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(functional_grad)

BOOST_AUTO_TEST_CASE(grad_returns_without_touching_dot_grad) {
  Tensor x = leaf({1.0, 2.0});
  Tensor w = leaf({3.0, 5.0});
  Tensor y = (x * x * w).sum();
  auto g = kiln::autograd::grad({y}, {x});
  BOOST_TEST(g.size() == 1u);
  std::vector<double> expected = {6.0, 20.0};  // 2 x w
  BOOST_TEST(values(g[0]) == expected, boost::test_tools::per_element());
  BOOST_TEST(!x.grad().defined());
  BOOST_TEST(!w.grad().defined());  // not asked for, not accumulated either
  BOOST_TEST(!g[0].requires_grad());
}

BOOST_AUTO_TEST_CASE(grad_of_several_inputs_and_unused_input) {
  Tensor x = leaf({1.0, 2.0});
  Tensor w = leaf({3.0, 5.0});
  Tensor unused = leaf({7.0});
  Tensor y = x * w;
  Tensor seed = kiln::from_vector(std::vector<double>{1.0, -1.0});
  auto g = kiln::autograd::grad({y}, {w, x, unused}, {seed});
  BOOST_TEST(g.size() == 3u);
  std::vector<double> gw = {1.0, -2.0}, gx = {3.0, -5.0}, gu = {0.0};
  BOOST_TEST(values(g[0]) == gw, boost::test_tools::per_element());
  BOOST_TEST(values(g[1]) == gx, boost::test_tools::per_element());
  BOOST_TEST(values(g[2]) == gu, boost::test_tools::per_element());
  // Non-scalar output without a seed.
  std::string msg = error_of<AutogradError>([&] { kiln::autograd::grad({x * 2.0}, {x}); });
  BOOST_TEST(contains(msg, "[2]"), msg);
}

BOOST_AUTO_TEST_CASE(create_graph_second_derivative_of_cube) {
  Tensor x = leaf({1.0, -2.0, 0.5});
  Tensor y = (x * x * x).sum();
  auto g1 = kiln::autograd::grad({y}, {x}, {}, /*retain_graph=*/false, /*create_graph=*/true);
  BOOST_TEST(g1[0].requires_grad());
  std::vector<double> d1 = {3.0, 12.0, 0.75};  // 3 x^2
  BOOST_TEST(values(g1[0]) == d1, boost::test_tools::per_element());
  auto g2 = kiln::autograd::grad({g1[0].sum()}, {x});
  std::vector<double> d2 = {6.0, -12.0, 3.0};  // 6 x
  BOOST_TEST(values(g2[0]) == d2, boost::test_tools::per_element());

  // The same with pow and through backward(create_graph) into .grad.
  Tensor z = leaf({2.0});
  kiln::pow(z, 3.0).sum().backward({}, false, /*create_graph=*/true);
  Tensor dz = z.grad();
  BOOST_TEST(dz.item() == 12.0);
  BOOST_TEST(dz.requires_grad());
  auto d2z = kiln::autograd::grad({dz.sum()}, {z});
  BOOST_TEST(d2z[0].item() == 12.0);  // 6 z
  // A .grad with history references its own leaf (as in PyTorch): drop it to free both.
  z.set_grad(Tensor());
}

namespace {

// Second derivatives against finite differences of the first derivative: gradcheck of the map
// x -> d f(x) / dx computed with create_graph.
void check_second_derivative(const std::string& name, Tensor (*f)(const Tensor&), Tensor x) {
  auto first = [f](const std::vector<Tensor>& in) {
    kiln::GradModeGuard enabled(true);  // gradcheck's finite differences run under no-grad
    Tensor v = in[0];
    if (!v.requires_grad()) {
      v = v.detach();
      v.requires_grad_();
    }
    return kiln::autograd::grad({f(v)}, {v}, {}, false, /*create_graph=*/true)[0];
  };
  auto result = kiln::autograd::gradcheck(first, {x});
  BOOST_TEST(result.ok, name << ": " << result.report);
}

Tensor tanh_sum(const Tensor& x) {
  return kiln::tanh(x * 1.5).sum();
}
Tensor softmax_weighted(const Tensor& x) {
  Tensor w = kiln::from_vector(std::vector<double>{1.0, -2.0, 0.5, 3.0, 0.0, 1.0}, {2, 3});
  return (kiln::softmax(x, 1) * w).sum();
}
Tensor log_softmax_weighted(const Tensor& x) {
  Tensor w = kiln::from_vector(std::vector<double>{1.0, -2.0, 0.5, 3.0, 0.0, 1.0}, {2, 3});
  return (kiln::log_softmax(x * 2.0, -1) * w * kiln::sigmoid(x)).sum();
}
Tensor layer_norm_cubed(const Tensor& x) {
  Tensor y = kiln::layer_norm(x, {3});
  return (y * y * y).sum();
}

}  // namespace

BOOST_AUTO_TEST_CASE(create_graph_matches_finite_differences) {
  check_second_derivative("tanh", tanh_sum, leaf({0.3, -0.8, 1.1, 0.05, -1.4, 0.6}, {2, 3}));
  check_second_derivative("softmax", softmax_weighted,
                          leaf({0.3, -0.8, 1.1, 0.05, -1.4, 0.6}, {2, 3}));
  check_second_derivative("log_softmax of a non-leaf", log_softmax_weighted,
                          leaf({0.3, -0.8, 1.1, 0.05, -1.4, 0.6}, {2, 3}));
  check_second_derivative("layer_norm", layer_norm_cubed,
                          leaf({0.3, -0.8, 1.1, 0.05, -1.4, 0.6}, {2, 3}));
}

BOOST_AUTO_TEST_SUITE_END()
