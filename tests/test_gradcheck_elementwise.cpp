// Gradchecks (f64 central differences over the full Jacobian) of the elementwise ops of
// autograd/ops.h: every differentiable unary op on inputs inside its domain and away from kinks,
// cast, the binary ops with broadcasting on both sides and with scalar operands, pow in both
// operands, maximum/minimum without ties, and where into both branches.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "support/gradcheck_support.h"

namespace {

using kiln::DType;
using kiln::Generator;
using kiln::Shape;
using kiln::Tensor;
using namespace kiln::test;

// Values in (-2, 2) whose magnitude stays at least 0.25 away from 0 (kinks of abs, relu).
Tensor away_from_zero(std::uint64_t seed) {
  Generator gen(seed);
  Tensor mag = kiln::rand({2, 3}, DType::f64, &gen) * 1.75 + 0.25;
  Tensor sgn = kiln::where(kiln::lt(kiln::rand({2, 3}, DType::f64, &gen), 0.5), -1.0,
                           kiln::ones({2, 3}, DType::f64));
  Tensor x = mag * sgn;
  x.requires_grad_();
  return x;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gradcheck_unary)

BOOST_AUTO_TEST_CASE(unbounded_domain) {
  struct Case {
    const char* name;
    Tensor (*op)(const Tensor&);
  };
  const Case cases[] = {
      {"exp", kiln::exp},   {"expm1", kiln::expm1}, {"sin", kiln::sin},
      {"cos", kiln::cos},   {"tanh", kiln::tanh},   {"sigmoid", kiln::sigmoid},
      {"silu", kiln::silu}, {"erf", kiln::erf},     {"neg", kiln::neg},
  };
  std::uint64_t seed = 1;
  for (const auto& c : cases) {
    Tensor x = uniform({2, 3}, -2.0, 2.0, seed++);
    check(c.name, [op = c.op](const Inputs& in) { return op(in[0]); }, {x});
  }
}

BOOST_AUTO_TEST_CASE(positive_domain) {
  struct Case {
    const char* name;
    Tensor (*op)(const Tensor&);
  };
  const Case cases[] = {
      {"log", kiln::log},
      {"sqrt", kiln::sqrt},
      {"rsqrt", kiln::rsqrt},
      {"reciprocal", kiln::reciprocal},
  };
  std::uint64_t seed = 20;
  for (const auto& c : cases) {
    Tensor x = uniform({2, 3}, 0.5, 2.0, seed++);
    check(c.name, [op = c.op](const Inputs& in) { return op(in[0]); }, {x});
  }
  // log1p is defined above -1.
  check("log1p", [](const Inputs& in) { return kiln::log1p(in[0]); },
        {uniform({2, 3}, -0.5, 2.0, 30)});
  // reciprocal on negative values too.
  check("reciprocal negative", [](const Inputs& in) { return kiln::reciprocal(in[0]); },
        {uniform({2, 3}, -2.0, -0.5, 31)});
}

BOOST_AUTO_TEST_CASE(kinked_ops_away_from_kinks) {
  check("abs", [](const Inputs& in) { return kiln::abs(in[0]); }, {away_from_zero(40)});
  check("relu", [](const Inputs& in) { return kiln::relu(in[0]); }, {away_from_zero(41)});
  check("abs method", [](const Inputs& in) { return in[0].abs(); }, {away_from_zero(42)});
}

BOOST_AUTO_TEST_CASE(gelu_both_approximations) {
  check("gelu", [](const Inputs& in) { return kiln::gelu(in[0]); },
        {uniform({2, 3}, -3.0, 3.0, 50)});
  check("gelu tanh",
        [](const Inputs& in) { return kiln::gelu(in[0], kiln::GeluApproximation::tanh); },
        {uniform({2, 3}, -3.0, 3.0, 51)});
}

BOOST_AUTO_TEST_CASE(cast_f64_to_f64) {
  // The same dtype returns the input itself; the f32 round trip's gradient is exercised in
  // test_autograd (gradcheck needs f64 end to end).
  check("cast f64", [](const Inputs& in) { return kiln::cast(in[0], DType::f64) * 2.0; },
        {uniform({2, 3}, -1.0, 1.0, 60)});
  check("to f64", [](const Inputs& in) { return in[0].to(DType::f64).exp(); },
        {uniform({2, 3}, -1.0, 1.0, 61)});
}

BOOST_AUTO_TEST_CASE(method_forms) {
  check("exp method", [](const Inputs& in) { return in[0].exp(); }, {uniform({3}, -1.0, 1.0, 70)});
  check("log method", [](const Inputs& in) { return in[0].log(); }, {uniform({3}, 0.5, 2.0, 71)});
  check("sqrt method", [](const Inputs& in) { return in[0].sqrt(); }, {uniform({3}, 0.5, 2.0, 72)});
  check("pow method", [](const Inputs& in) { return in[0].pow(2.5); },
        {uniform({3}, 0.5, 2.0, 73)});
  check("unary minus", [](const Inputs& in) { return -in[0]; }, {uniform({3}, -1.0, 1.0, 74)});
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(gradcheck_binary)

BOOST_AUTO_TEST_CASE(arithmetic_broadcasting_both_sides) {
  struct Case {
    const char* name;
    Tensor (*op)(const Tensor&, const Tensor&);
  };
  const Case cases[] = {
      {"add", kiln::add}, {"sub", kiln::sub}, {"mul", kiln::mul}, {"div", kiln::div}};
  std::uint64_t seed = 100;
  for (const auto& c : cases) {
    // [2, 1, 3] with [4, 1] -> [2, 4, 3]: each side is broadcast along some dim.
    Tensor a = uniform({2, 1, 3}, -2.0, 2.0, seed++);
    Tensor b = uniform({4, 1}, 0.5, 2.0, seed++);  // positive: a safe divisor
    check(c.name, [op = c.op](const Inputs& in) { return op(in[0], in[1]); }, {a, b});
    check(std::string(c.name) + " swapped",
          [op = c.op](const Inputs& in) { return op(in[1], in[0]); },
          {uniform({2, 1, 3}, 0.5, 2.0, seed++), uniform({4, 1}, -2.0, 2.0, seed++)});
  }
}

BOOST_AUTO_TEST_CASE(arithmetic_same_shape_and_operators) {
  Tensor a = uniform({2, 3}, -2.0, 2.0, 110);
  Tensor b = uniform({2, 3}, 0.5, 2.0, 111);
  check("a * b + a / b - b", [](const Inputs& in) { return in[0] * in[1] + in[0] / in[1] - in[1]; },
        {a, b});
  // Only one operand requires grad.
  Tensor c = kiln::from_vector(std::vector<double>{1, 2, 3}, {3});
  check("mul by constant tensor", [c](const Inputs& in) { return in[0] * c; }, {a});
}

BOOST_AUTO_TEST_CASE(scalar_overloads) {
  Tensor x = uniform({2, 3}, 0.5, 2.0, 120);
  check("x + 1.5", [](const Inputs& in) { return kiln::add(in[0], 1.5); }, {x});
  check("2 + x", [](const Inputs& in) { return kiln::add(2.0, in[0]); }, {x});
  check("x - 0.25", [](const Inputs& in) { return kiln::sub(in[0], 0.25); }, {x});
  check("3 - x", [](const Inputs& in) { return kiln::sub(3.0, in[0]); }, {x});
  check("x * -1.5", [](const Inputs& in) { return kiln::mul(in[0], -1.5); }, {x});
  check("2 * x", [](const Inputs& in) { return kiln::mul(2.0, in[0]); }, {x});
  check("x / 4", [](const Inputs& in) { return kiln::div(in[0], 4.0); }, {x});
  check("1.5 / x", [](const Inputs& in) { return kiln::div(1.5, in[0]); }, {x});
  check("operators", [](const Inputs& in) { return 3.0 - in[0] * 2.0 + 1.0 / in[0]; }, {x});
}

BOOST_AUTO_TEST_CASE(pow_both_operands) {
  Tensor base = uniform({2, 1, 3}, 0.5, 2.0, 130);
  Tensor exponent = uniform({4, 1}, -1.5, 2.5, 131);
  check("pow tensor^tensor", [](const Inputs& in) { return kiln::pow(in[0], in[1]); },
        {base, exponent});
  check("pow tensor^scalar", [](const Inputs& in) { return kiln::pow(in[0], 3.0); },
        {uniform({2, 3}, -2.0, 2.0, 132)});
  check("pow tensor^fraction", [](const Inputs& in) { return kiln::pow(in[0], -0.5); },
        {uniform({2, 3}, 0.5, 2.0, 133)});
  check("pow scalar^tensor", [](const Inputs& in) { return kiln::pow(2.5, in[0]); },
        {uniform({2, 3}, -2.0, 2.0, 134)});
}

BOOST_AUTO_TEST_CASE(maximum_minimum_without_ties) {
  // Interleaved values so each side wins somewhere, and no element ties.
  Tensor a = leaf({0.1, 1.2, -0.7, 2.0, -1.4, 0.9}, {2, 3});
  Tensor b = leaf({0.6, 0.3, -0.2, 1.1, -0.5, 1.7}, {2, 3});
  check("maximum", [](const Inputs& in) { return kiln::maximum(in[0], in[1]); }, {a, b});
  check("minimum", [](const Inputs& in) { return kiln::minimum(in[0], in[1]); }, {a, b});
  // Broadcast: [2, 3] against [3].
  Tensor c = leaf({0.45, -0.1, 1.5}, {3});
  check("maximum broadcast", [](const Inputs& in) { return kiln::maximum(in[0], in[1]); }, {a, c});
  check("minimum broadcast", [](const Inputs& in) { return kiln::minimum(in[1], in[0]); }, {a, c});
  check("maximum scalar", [](const Inputs& in) { return kiln::maximum(in[0], 0.5); }, {a});
  check("minimum scalar", [](const Inputs& in) { return kiln::minimum(0.5, in[0]); }, {a});
}

BOOST_AUTO_TEST_CASE(hand_computed_rules_at_special_points) {
  // maximum/minimum ties split the gradient evenly between the operands.
  Tensor a = leaf({1.0, 2.0, 3.0}, {3});
  Tensor b = leaf({1.0, 5.0, 0.0}, {3});
  (kiln::maximum(a, b) + kiln::minimum(a, b) * 10.0).sum().backward();
  std::vector<double> ga = {5.5, 10.0, 1.0}, gb = {5.5, 1.0, 10.0};
  auto va = a.grad().to_vector<double>(), vb = b.grad().to_vector<double>();
  BOOST_TEST(va == ga, boost::test_tools::per_element());
  BOOST_TEST(vb == gb, boost::test_tools::per_element());

  // pow at a zero base: d/da 0^2 = 0; d/db 0^b is taken as its limit 0 for b >= 0.
  Tensor base = leaf({0.0, 2.0}, {2});
  Tensor exponent = leaf({2.0, 3.0}, {2});
  kiln::pow(base, exponent).sum().backward();
  auto gbase = base.grad().to_vector<double>(), gexp = exponent.grad().to_vector<double>();
  BOOST_TEST(gbase[0] == 0.0);
  BOOST_TEST(gbase[1] == 12.0);
  BOOST_TEST(gexp[0] == 0.0);
  BOOST_TEST(gexp[1] == 8.0 * std::log(2.0), boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(where_both_branches) {
  Tensor cond = kiln::from_vector(std::vector<bool>{true, false, false, true, true, false}, {2, 3});
  Tensor a = uniform({2, 3}, -1.0, 1.0, 140);
  Tensor b = uniform({2, 3}, -1.0, 1.0, 141);
  check("where", [cond](const Inputs& in) { return kiln::where(cond, in[0], in[1]); }, {a, b});
  // Broadcast branches: a [3] and b [2, 1].
  Tensor a3 = uniform({3}, -1.0, 1.0, 142);
  Tensor b21 = uniform({2, 1}, -1.0, 1.0, 143);
  check("where broadcast", [cond](const Inputs& in) { return kiln::where(cond, in[0], in[1]); },
        {a3, b21});
  check("where scalar else", [cond](const Inputs& in) { return kiln::where(cond, in[0], 2.0); },
        {a});
  check("where scalar then", [cond](const Inputs& in) { return kiln::where(cond, -1.0, in[0]); },
        {b});
  // A condition computed from the input itself (relu-like gating, away from the switch point).
  check("where self condition",
        [](const Inputs& in) {
          return kiln::where(kiln::gt(in[0], 0.0), in[0] * in[0], kiln::exp(in[0]));
        },
        {away_from_zero(144)});
}

BOOST_AUTO_TEST_CASE(chains_of_elementwise_ops) {
  check("tanh(sigmoid(x) * exp(-x*x)) + log1p(x*x)",
        [](const Inputs& in) {
          const Tensor& x = in[0];
          return kiln::tanh(kiln::sigmoid(x) * kiln::exp(-(x * x))) + kiln::log1p(x * x);
        },
        {uniform({2, 3}, -2.0, 2.0, 150)});
}

BOOST_AUTO_TEST_SUITE_END()
