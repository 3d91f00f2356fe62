// Gradchecks (f64 central differences) of the ops that work along dims: cumsum, max/min over a
// dim, bmm, einsum, negative pad, softmax/log_softmax (also masked); and hand-computed gradients
// where differences cannot see the rule: max ties (the first index only), std of a constant row.
// The forward ops are tested in test_ops_along_dims.cpp.
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

BOOST_AUTO_TEST_SUITE(gradcheck_along_dims)

BOOST_AUTO_TEST_CASE(cumsum_along_dims) {
  Tensor x = uniform({2, 3, 4}, -1, 1, 4);
  for (std::int64_t d : {0, 1, 2, -1}) {
    for (bool reverse : {false, true}) {
      check("cumsum " + std::to_string(d) + (reverse ? " reverse" : ""),
            [d, reverse](const Inputs& in) { return kiln::cumsum(in[0], d, reverse); }, {x});
    }
  }
  check("cumsum transposed",
        [](const Inputs& in) { return kiln::cumsum(in[0].transpose(0, 2), 1); }, {x});
}

BOOST_AUTO_TEST_CASE(max_and_min_over_a_dim) {
  Tensor x = uniform({3, 4}, -1, 1, 5);  // distinct values almost surely
  for (std::int64_t d : {0, 1, -1}) {
    for (bool keepdim : {false, true}) {
      std::string what = std::to_string(d) + (keepdim ? " keepdim" : "");
      check("max " + what,
            [d, keepdim](const Inputs& in) { return kiln::max(in[0], d, keepdim).values; }, {x});
      check("min " + what,
            [d, keepdim](const Inputs& in) { return kiln::min(in[0], d, keepdim).values; }, {x});
    }
  }
  check("max of 0-d", [](const Inputs& in) { return kiln::max(in[0], 0).values * 3.0; },
        {leaf({0.5}, {})});
}

BOOST_AUTO_TEST_CASE(max_over_a_dim_gives_a_tie_gradient_to_the_first_only) {
  // Unlike amax (which splits ties), max(dim) sends the gradient to the index it returns.
  Tensor x = leaf({1.0, 3.0, 3.0, 2.0, 2.0, 0.0}, {2, 3});
  kiln::max(x, 1).values.sum().backward();
  std::vector<double> want = {0, 1, 0, 1, 0, 0};
  BOOST_TEST(grad_of(x) == want, boost::test_tools::per_element());
  Tensor y = leaf({1.0, 3.0, 1.0, 2.0}, {2, 2});
  (kiln::min(y, 0, true).values * kiln::from_vector(std::vector<double>{5.0, 7.0}, {1, 2}))
      .sum()
      .backward();
  want = {5, 0, 0, 7};
  BOOST_TEST(grad_of(y) == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(bmm_and_einsum) {
  Tensor a = uniform({2, 3, 4}, -1, 1, 6), b = uniform({2, 4, 2}, -1, 1, 7);
  check("bmm", [](const Inputs& in) { return kiln::bmm(in[0], in[1]); }, {a, b});
  check("bmm transposed",
        [](const Inputs& in) { return kiln::bmm(in[1].transpose(1, 2), in[0].transpose(1, 2)); },
        {a, b});
  Tensor m = uniform({3, 4}, -1, 1, 8), n = uniform({4, 2}, -1, 1, 9), v = uniform({4}, -1, 1, 10);
  Tensor w = uniform({4}, -1, 1, 17), c = uniform({2, 5, 4}, -1, 1, 18);
  struct Case {
    const char* equation;
    std::vector<Tensor> operands;
  };
  const Case cases[] = {
      {"ij,jk->ik", {m, n}},
      {"bij,bjk->bik", {a, b}},
      {"ij->ji", {m}},
      {"ij->", {m}},
      {"ij->j", {m}},
      {"i,j->ij", {v, w}},
      {"ij,j->i", {m, v}},
      {"i,i->", {v, w}},
      {"...ij->...ji", {a}},
      {"bij,bkj->bik", {a, c}},
      {"ij,jk,kl->il", {m, n, uniform({2, 3}, -1, 1, 11)}},
  };
  for (const auto& c : cases) {
    std::string eq = c.equation;
    check(
        "einsum " + eq, [eq](const Inputs& in) { return kiln::einsum(eq, in); }, c.operands);
  }
}

BOOST_AUTO_TEST_CASE(pad_that_crops) {
  Tensor x = uniform({3, 4}, -1, 1, 12);
  for (Dims pads : {Dims{-1, -2}, Dims{2, -3}, Dims{-1, 1, 1, -2}, Dims{0, 0, -3, 0}}) {
    check("pad", [pads](const Inputs& in) { return kiln::pad(in[0], pads, 0.5); }, {x});
  }
}

BOOST_AUTO_TEST_CASE(softmax_and_log_softmax) {
  Tensor x = uniform({3, 4}, -2, 2, 13);
  for (std::int64_t d : {0, 1, -1}) {
    check("softmax " + std::to_string(d), [d](const Inputs& in) { return kiln::softmax(in[0], d); },
          {x});
    check("log_softmax " + std::to_string(d),
          [d](const Inputs& in) { return kiln::log_softmax(in[0], d); }, {x});
  }
  // A masked (-inf) position gets no gradient and does not poison the others.
  Tensor y = leaf({0.3, -0.2, 1.1}, {3});
  Tensor mask = bools({false, true, false}, {3});
  check("masked softmax",
        [mask](const Inputs& in) {
          return kiln::softmax(kiln::masked_fill(in[0], mask, -INFINITY), 0);
        },
        {y});
}

BOOST_AUTO_TEST_CASE(std_of_a_constant_row_has_gradient_zero) {
  // Row 0 is constant (std 0, sqrt'(0) infinite); PyTorch defines the gradient as 0 there.
  Tensor x = leaf({0.1, 0.1, 0.1, 0.1, 1.0, 2.0, 4.0, 7.0}, {2, 4});
  kiln::std(x, {1}).sum().backward();
  auto g = grad_of(x);
  for (double v : g) BOOST_TEST(std::isfinite(v));
  // Row 1 against the closed form (x - mean) / ((n - 1) * std).
  double mean = 3.5, ss = 0;
  for (double v : {1.0, 2.0, 4.0, 7.0}) ss += (v - mean) * (v - mean);
  double sd = std::sqrt(ss / 3);
  for (int j = 0; j < 4; ++j) {
    BOOST_TEST(std::abs(g[j]) < 1e-6);
    double want = (std::vector<double>{1, 2, 4, 7}[j] - mean) / (3 * sd);
    BOOST_TEST(std::abs(g[4 + j] - want) < 1e-12);
  }
  // Exactly representable constant rows give exactly 0; so does an all-constant tensor.
  Tensor z = leaf({2.0, 2.0, 2.0}, {3});
  kiln::std(z).backward();
  std::vector<double> want = {0, 0, 0};
  BOOST_TEST(grad_of(z) == want, boost::test_tools::per_element());
  check("std of a varying row", [](const Inputs& in) { return kiln::std(in[0], {1}); },
        {uniform({2, 4}, -1, 1, 16)});
}

BOOST_AUTO_TEST_SUITE_END()
