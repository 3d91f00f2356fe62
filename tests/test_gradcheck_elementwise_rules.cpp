// Gradchecks (f64 central differences) of the elementwise ops with PyTorch's rules at their edges:
// clamp (number and tensor bounds), square, softplus (both sides of the threshold), leaky_relu,
// masked_fill (into x and into a tensor value), tril/triu, remainder; and hand-computed gradients
// where differences cannot see the rule: at clamp's bounds, leaky_relu at 0, the zero gradients of
// rounding ops, pow(x, 0) at 0. The forward rules are tested in test_ops_elementwise_rules.cpp.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <vector>

#include "autograd/ops.h"
#include "support/gradcheck_support.h"

namespace {

using kiln::Dims;
using kiln::DType;
using kiln::Shape;
using kiln::Tensor;
using namespace kiln::test;

std::vector<double> grad_of(const Tensor& x) {
  return x.grad().to_vector<double>();
}

Tensor bools(std::vector<bool> v, const Shape& s) {
  return kiln::from_vector(v, s);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gradcheck_elementwise_rules)

BOOST_AUTO_TEST_CASE(clamp_away_from_its_bounds) {
  // Values at least 0.1 from the bounds -0.5 and 0.5, on both sides of them.
  Tensor x = leaf({-1.2, -0.7, -0.3, 0.1, 0.35, 0.8, 1.4, -0.05}, {2, 4});
  check("clamp both", [](const Inputs& in) { return kiln::clamp(in[0], -0.5, 0.5); }, {x});
  check("clamp min", [](const Inputs& in) { return kiln::clamp_min(in[0], -0.5); }, {x});
  check("clamp max", [](const Inputs& in) { return kiln::clamp_max(in[0], 0.5); }, {x});
  // Tensor bounds get the gradient where they bind.
  Tensor lo = leaf({-0.5, 0.0, -1.0, 0.2}, {4});
  Tensor hi = leaf({0.6, 0.9}, {2, 1});
  check("clamp tensor bounds", [](const Inputs& in) { return kiln::clamp(in[0], in[1], in[2]); },
        {x, lo, hi});
}

BOOST_AUTO_TEST_CASE(clamp_gradient_at_the_bounds_passes_as_in_pytorch) {
  // x == min and x == max keep their gradient (PyTorch: min <= x <= max).
  Tensor x = leaf({-1.0, -0.5, 0.0, 0.5, 1.0}, {5});
  kiln::clamp(x, -0.5, 0.5).sum().backward();
  std::vector<double> want = {0, 1, 1, 1, 0};
  BOOST_TEST(grad_of(x) == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(clamp_tensor_bound_gradients_follow_pytorch_at_ties_and_crossed_bounds) {
  // PyTorch: x gets it where min <= x <= max, min where x < min < max, max where x > max or
  // max < min (then max is the value everywhere).
  Tensor x = leaf({-1.0, 0.0, 0.5, 1.0, 2.0, 0.0}, {6});
  Tensor lo = leaf({0.0, 0.0, 0.0, 0.0, 0.0, 2.0}, {6});
  Tensor hi = leaf({1.0, 1.0, 1.0, 1.0, 1.0, 1.0}, {6});
  kiln::clamp(x, lo, hi).sum().backward();
  std::vector<double> want_x = {0, 1, 1, 1, 0, 0}, want_lo = {1, 0, 0, 0, 0, 0},
                      want_hi = {0, 0, 0, 0, 1, 1};
  BOOST_TEST(grad_of(x) == want_x, boost::test_tools::per_element());
  BOOST_TEST(grad_of(lo) == want_lo, boost::test_tools::per_element());
  BOOST_TEST(grad_of(hi) == want_hi, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(square_softplus_and_leaky_relu) {
  check("square", [](const Inputs& in) { return kiln::square(in[0]); },
        {uniform({2, 3}, -2, 2, 1)});
  // Inputs on both sides of the threshold (beta * x > threshold is linear), away from it.
  Tensor x = leaf({-6, -1.5, -0.2, 0.4, 2.3, 4.5, 5.5, 12}, {8});
  check("softplus default", [](const Inputs& in) { return kiln::softplus(in[0]); }, {x});
  check("softplus beta 2 threshold 10",
        [](const Inputs& in) { return kiln::softplus(in[0], 2.0, 10.0); }, {x});
  check("softplus beta 0.5 threshold 1",
        [](const Inputs& in) { return kiln::softplus(in[0], 0.5, 1.0); }, {x});
  Tensor y = leaf({-2, -0.5, -0.1, 0.1, 0.7, 3}, {2, 3});
  check("leaky_relu", [](const Inputs& in) { return kiln::leaky_relu(in[0], 0.1); }, {y});
  check("leaky_relu default", [](const Inputs& in) { return kiln::leaky_relu(in[0]); }, {y});
}

BOOST_AUTO_TEST_CASE(leaky_relu_gradient_at_zero_is_the_slope) {
  // PyTorch: x > 0 ? 1 : slope, so x = 0 takes the slope.
  Tensor x = leaf({0.0, -0.0}, {2});
  kiln::leaky_relu(x, 0.2).sum().backward();
  std::vector<double> want = {0.2, 0.2};
  BOOST_TEST(grad_of(x) == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(masked_fill_into_x_and_a_tensor_value) {
  Tensor mask = bools({true, false, false, true, true, false}, {2, 3});
  Tensor x = uniform({2, 3}, -1, 1, 2);
  Tensor value = leaf({0.75}, {});
  check("masked_fill number",
        [mask](const Inputs& in) { return kiln::masked_fill(in[0], mask, 2.0); }, {x});
  check("masked_fill tensor value",
        [mask](const Inputs& in) { return kiln::masked_fill(in[0], mask, in[1]) * in[0]; },
        {x, value});
  check("masked_fill broadcast mask",
        [](const Inputs& in) {
          return kiln::masked_fill(in[0], bools({false, true, false}, {3}), in[1]);
        },
        {x, value});
}

BOOST_AUTO_TEST_CASE(tril_and_triu) {
  Tensor x = uniform({2, 3, 4}, -1, 1, 3);
  for (std::int64_t k : {-1, 0, 2}) {
    check("tril " + std::to_string(k), [k](const Inputs& in) { return kiln::tril(in[0], k); }, {x});
    check("triu " + std::to_string(k), [k](const Inputs& in) { return kiln::triu(in[0], k); }, {x});
  }
  check("tril of a transposed view",
        [](const Inputs& in) { return kiln::tril(in[0].transpose(-1, -2)); }, {x});
}

BOOST_AUTO_TEST_CASE(remainder_between_its_jumps) {
  // a / b stays at least 0.1 from an integer, where remainder jumps.
  Tensor a = leaf({5.3, -5.3, 5.3, -5.3, 2.5, 7.9}, {6});
  Tensor b = leaf({2.0, 2.0, -2.0, -2.0, 1.5, 3.0}, {6});
  check("remainder", [](const Inputs& in) { return kiln::remainder(in[0], in[1]); }, {a, b});
  check("remainder number", [](const Inputs& in) { return kiln::remainder(in[0], 1.5); }, {a});
}

BOOST_AUTO_TEST_CASE(rounding_ops_have_zero_gradient) {
  // Away from their jumps the derivative is 0; kiln returns 0 (not no gradient) as PyTorch does.
  Tensor x = leaf({-1.7, -0.3, 0.4, 1.2, 2.6}, {5});
  for (auto op : {&kiln::floor, &kiln::ceil, &kiln::round, &kiln::trunc}) {
    check("rounding", [op](const Inputs& in) { return op(in[0]) * in[0]; }, {x});
  }
  Tensor y = leaf({3.7, -3.7}, {2});
  kiln::floor_divide(y, 2.0).sum().backward();
  std::vector<double> want = {0, 0};
  BOOST_TEST(grad_of(y) == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(pow_with_exponent_zero_has_gradient_zero_at_zero) {
  // d/dx x^0 = 0 everywhere, also at x = 0 where b * x^(b-1) would be 0 * inf = NaN.
  Tensor x = leaf({0.0, -0.0, 2.0, -3.0}, {4});
  kiln::pow(x, 0.0).sum().backward();
  std::vector<double> want = {0, 0, 0, 0};
  BOOST_TEST(grad_of(x) == want, boost::test_tools::per_element());
  Tensor xi = leaf({0.0, 1.5}, {2});  // an integer exponent
  kiln::pow(xi, 0).sum().backward();
  want = {0, 0};
  BOOST_TEST(grad_of(xi) == want, boost::test_tools::per_element());
  check("pow 0", [](const Inputs& in) { return kiln::pow(in[0], 0); }, {xi});
  // A tensor exponent holding 0: the base gradient is 0 at 0; the exponent's is log(x) * x^b with
  // the PyTorch convention 0 at x = 0.
  Tensor base = leaf({0.0, 2.0}, {2}), e = leaf({0.0, 0.0}, {2});
  kiln::pow(base, e).sum().backward();
  want = {0, 0};
  BOOST_TEST(grad_of(base) == want, boost::test_tools::per_element());
  want = {0, std::log(2.0)};
  BOOST_TEST(grad_of(e) == want, boost::test_tools::tolerance(1e-15)
                                     << boost::test_tools::per_element());
  check("pow", [](const Inputs& in) { return kiln::pow(in[0], in[1]); },
        {uniform({4}, 0.5, 2, 14), uniform({4}, -1, 2, 15)});
}

BOOST_AUTO_TEST_SUITE_END()
