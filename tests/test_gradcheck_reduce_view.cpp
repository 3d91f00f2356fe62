// Gradchecks of the reductions (sum, mean, prod with zeros, amax/amin, var, std, logsumexp) over
// one, several and all dims, with keepdim both ways and negative dims; a hand-computed check
// that amax/amin ties share the gradient evenly; and gradchecks of the views (reshape, permute,
// transpose, expand, slice, select, squeeze, unsqueeze, flatten, contiguous) and view chains.
#include <boost/test/unit_test.hpp>

#include <functional>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "support/gradcheck_support.h"

namespace {

using kiln::Dims;
using kiln::DType;
using kiln::Generator;
using kiln::Shape;
using kiln::Tensor;
using namespace kiln::test;

std::string dims_str(const Dims& dims, bool keepdim) {
  std::string s = "dims [";
  for (auto d : dims) s += std::to_string(d) + " ";
  return s + "] keepdim " + (keepdim ? "true" : "false");
}

// The dim lists every reduction is checked over, on a [2, 3, 4] input.
const std::vector<Dims> kDimLists = {{1}, {-1}, {0, 2}, {-3, -2}, {}, {0, 1, 2}};

using Reduce = std::function<Tensor(const Tensor&, const Dims&, bool)>;

void check_reduction(const std::string& name, const Reduce& reduce, double lo, double hi,
                     std::uint64_t seed) {
  for (const auto& dims : kDimLists)
    for (bool keepdim : {false, true}) {
      Tensor x = uniform({2, 3, 4}, lo, hi, seed++);
      check(name + " " + dims_str(dims, keepdim),
            [&](const Inputs& in) { return reduce(in[0], dims, keepdim); }, {x});
    }
}

std::vector<double> grad_of(const Tensor& x) {
  return x.grad().to_vector<double>();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gradcheck_reductions)

BOOST_AUTO_TEST_CASE(sum_mean) {
  check_reduction(
      "sum", [](const Tensor& x, const Dims& d, bool k) { return kiln::sum(x, d, k); }, -1.0, 1.0,
      1);
  check_reduction(
      "mean", [](const Tensor& x, const Dims& d, bool k) { return kiln::mean(x, d, k); }, -1.0, 1.0,
      100);
  check("sum method", [](const Inputs& in) { return in[0].sum({0}) * in[0].mean(); },
        {uniform({2, 3}, -1.0, 1.0, 200)});
}

BOOST_AUTO_TEST_CASE(prod_nonzero) {
  // Magnitudes near 1 keep the product of 24 values well scaled; both signs appear.
  check_reduction(
      "prod", [](const Tensor& x, const Dims& d, bool k) { return kiln::prod(x, d, k); }, 0.6, 1.4,
      300);
  check("prod mixed signs", [](const Inputs& in) { return kiln::prod(in[0], {1}); },
        {leaf({-0.7, 1.2, 0.9, 1.1, -1.3, -0.8}, {2, 3})});
}

BOOST_AUTO_TEST_CASE(prod_with_zeros) {
  // Row 0: one zero; row 1: two zeros; row 2: none. The rule is exact at zeros, and central
  // differences of a product are exact too (it is linear in each element).
  Tensor x = leaf({0.5, 0.0, 2.0, 1.5,  //
                   0.0, 3.0, 0.0, 0.7,  //
                   1.1, 0.9, -1.2, 1.3},
                  {3, 4});
  check("prod zeros dim 1", [](const Inputs& in) { return kiln::prod(in[0], {1}); }, {x});
  check("prod zeros dim -1 keepdim", [](const Inputs& in) { return kiln::prod(in[0], {-1}, true); },
        {x});
  check("prod zeros all", [](const Inputs& in) { return kiln::prod(in[0]); },
        {leaf({0.5, 0.0, 2.0, 1.5, -1.1, 0.9}, {2, 3})});

  // Hand-computed: d prod(row)/d x_j.
  Tensor y = leaf({0.5, 0.0, 2.0, 1.5, 0.0, 3.0, 0.0, 0.7}, {2, 4});
  kiln::prod(y, {1}).sum().backward();
  std::vector<double> expected = {0, 0.5 * 2.0 * 1.5, 0, 0, 0, 0, 0, 0};
  auto g = grad_of(y);
  BOOST_TEST(g == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(amax_amin_without_ties) {
  check_reduction(
      "amax", [](const Tensor& x, const Dims& d, bool k) { return kiln::amax(x, d, k); }, -1.0, 1.0,
      400);
  check_reduction(
      "amin", [](const Tensor& x, const Dims& d, bool k) { return kiln::amin(x, d, k); }, -1.0, 1.0,
      500);
  check("max/min methods", [](const Inputs& in) { return in[0].max({1}) - in[0].min({0}).sum(); },
        {uniform({2, 3}, -1.0, 1.0, 550)});
}

BOOST_AUTO_TEST_CASE(amax_amin_ties_share_gradient_evenly) {
  // Row 0 has its max twice, row 1 three times; the min of row 0 is unique.
  Tensor x = leaf({1.0, 3.0, 3.0, 0.5,  //
                   2.0, 2.0, 2.0, -1.0},
                  {2, 4});
  (kiln::amax(x, {1}) * kiln::from_vector(std::vector<double>{1.0, 6.0}, {2})).sum().backward();
  std::vector<double> expected = {0, 0.5, 0.5, 0, 2, 2, 2, 0};
  auto g = grad_of(x);
  BOOST_TEST(g == expected, boost::test_tools::per_element());

  // Over every element: the global max 3.0 appears twice.
  Tensor z = leaf({1.0, 3.0, 3.0, 0.5, -1.0, 2.0}, {2, 3});
  kiln::amax(z).backward();
  expected = {0, 0.5, 0.5, 0, 0, 0};
  g = grad_of(z);
  BOOST_TEST(g == expected, boost::test_tools::per_element());

  // amin with four tied minima, keepdim.
  Tensor w = leaf({-2.0, -2.0, 1.0, -2.0, -2.0, 0.0}, {3, 2});
  kiln::amin(w, {0, 1}, true).sum().backward();
  expected = {0.25, 0.25, 0, 0.25, 0.25, 0};
  g = grad_of(w);
  BOOST_TEST(g == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(var_std_corrections) {
  for (double correction : {0.0, 1.0}) {
    std::string c = " correction " + std::to_string(static_cast<int>(correction));
    check_reduction(
        "var" + c,
        [correction](const Tensor& x, const Dims& d, bool k) {
          return kiln::var(x, d, correction, k);
        },
        -1.0, 1.0, 600 + static_cast<std::uint64_t>(correction) * 50);
    check_reduction(
        "std" + c,
        [correction](const Tensor& x, const Dims& d, bool k) {
          return kiln::std(x, d, correction, k);
        },
        -1.0, 1.0, 700 + static_cast<std::uint64_t>(correction) * 50);
  }
}

BOOST_AUTO_TEST_CASE(logsumexp_dims) {
  check_reduction(
      "logsumexp", [](const Tensor& x, const Dims& d, bool k) { return kiln::logsumexp(x, d, k); },
      -2.0, 2.0, 800);
  // Large values: the max shift keeps it finite.
  check("logsumexp large", [](const Inputs& in) { return kiln::logsumexp(in[0] + 500.0, {1}); },
        {uniform({2, 3}, -1.0, 1.0, 850)});
}

BOOST_AUTO_TEST_CASE(sum_to_broadcast_source) {
  // sum_to undoes broadcasting: leading dims vanish, size-1 dims are kept.
  Tensor x = uniform({2, 3, 4}, -1.0, 1.0, 870);
  check("sum_to [3, 1]", [](const Inputs& in) { return kiln::sum_to(in[0], {3, 1}); }, {x});
  check("sum_to [1, 4]", [](const Inputs& in) { return kiln::sum_to(in[0], {1, 4}); }, {x});
  check("sum_to [2, 1, 4]", [](const Inputs& in) { return kiln::sum_to(in[0], {2, 1, 4}); }, {x});
  check("sum_to []", [](const Inputs& in) { return kiln::sum_to(in[0], {}); }, {x});
  check("sum_to same shape", [](const Inputs& in) { return kiln::sum_to(in[0], {2, 3, 4}); }, {x});
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(gradcheck_views)

BOOST_AUTO_TEST_CASE(reshape_permute_transpose) {
  Tensor x = uniform({2, 3, 4}, -1.0, 1.0, 900);
  // Each output times a distinct weight so a wrong element mapping changes the Jacobian's sign
  // pattern (gradcheck compares the full Jacobian anyway).
  check("reshape", [](const Inputs& in) { return kiln::reshape(in[0], {4, -1}); }, {x});
  check("reshape method", [](const Inputs& in) { return in[0].reshape({6, 4}) * 2.0; }, {x});
  check("view method", [](const Inputs& in) { return in[0].view({24}); }, {x});
  check("permute", [](const Inputs& in) { return kiln::permute(in[0], {2, 0, 1}); }, {x});
  check("permute negative", [](const Inputs& in) { return in[0].permute({-1, -3, -2}); }, {x});
  check("transpose", [](const Inputs& in) { return kiln::transpose(in[0], 0, 2); }, {x});
  check("transpose negative", [](const Inputs& in) { return in[0].transpose(-1, -2); }, {x});
  check("t", [](const Inputs& in) { return in[0].t(); }, {uniform({3, 4}, -1.0, 1.0, 901)});
  // A reshape of a transposed (non-contiguous) tensor copies.
  check("reshape of transpose", [](const Inputs& in) { return in[0].t().reshape({12}); },
        {uniform({3, 4}, -1.0, 1.0, 902)});
}

BOOST_AUTO_TEST_CASE(expand) {
  check("expand [3,1] -> [3,4]",
        [](const Inputs& in) {
          return kiln::expand(in[0], {3, 4});
        },
        {uniform({3, 1}, -1.0, 1.0, 910)});
  check("expand new leading dims",
        [](const Inputs& in) {
          return in[0].expand({2, 3, 4});
        },
        {uniform({1, 4}, -1.0, 1.0, 911)});
  check("broadcast_to then mul",
        [](const Inputs& in) {
          return in[0].broadcast_to({2, 3}) * in[0].broadcast_to({2, 3});
        },
        {uniform({3}, -1.0, 1.0, 912)});
}

BOOST_AUTO_TEST_CASE(slice_select) {
  Tensor x = uniform({4, 6}, -1.0, 1.0, 920);
  check("slice", [](const Inputs& in) { return kiln::slice(in[0], 1, 1, 4); }, {x});
  check("slice step 2", [](const Inputs& in) { return kiln::slice(in[0], 1, 0, 6, 2); }, {x});
  check("slice negative start step 2",
        [](const Inputs& in) { return kiln::slice(in[0], -1, -5, 6, 2); }, {x});
  check("slice negative start and end", [](const Inputs& in) { return in[0].slice(0, -3, -1); },
        {x});
  check("slice clamped end", [](const Inputs& in) { return in[0].slice(0, 2, 100, 3); }, {x});
  check("select", [](const Inputs& in) { return kiln::select(in[0], 0, 2); }, {x});
  check("select negative", [](const Inputs& in) { return in[0].select(-1, -2); }, {x});
  // Overlapping slices of one input: gradients add.
  check("overlapping slices",
        [](const Inputs& in) { return in[0].slice(1, 0, 4) * in[0].slice(1, 2, 6); }, {x});
}

BOOST_AUTO_TEST_CASE(squeeze_unsqueeze_flatten) {
  Tensor x = uniform({2, 1, 3, 1}, -1.0, 1.0, 930);
  check("squeeze all", [](const Inputs& in) { return kiln::squeeze(in[0]); }, {x});
  check("squeeze dim", [](const Inputs& in) { return kiln::squeeze(in[0], 1); }, {x});
  check("squeeze negative dim", [](const Inputs& in) { return in[0].squeeze(-1); }, {x});
  check("unsqueeze", [](const Inputs& in) { return kiln::unsqueeze(in[0], 0); }, {x});
  check("unsqueeze negative", [](const Inputs& in) { return in[0].unsqueeze(-1); }, {x});
  Tensor y = uniform({2, 3, 4}, -1.0, 1.0, 931);
  check("flatten", [](const Inputs& in) { return kiln::flatten(in[0]); }, {y});
  check("flatten range", [](const Inputs& in) { return in[0].flatten(1, 2); }, {y});
  check("flatten negative", [](const Inputs& in) { return in[0].flatten(-3, -2); }, {y});
}

BOOST_AUTO_TEST_CASE(contiguous_and_clone) {
  check("contiguous of transpose",
        [](const Inputs& in) {
          Tensor c = in[0].transpose(0, 1).contiguous();
          BOOST_TEST(c.is_contiguous());
          return c * c;
        },
        {uniform({3, 4}, -1.0, 1.0, 940)});
  check("clone", [](const Inputs& in) { return in[0].clone() * 3.0; },
        {uniform({2, 3}, -1.0, 1.0, 941)});
}

BOOST_AUTO_TEST_CASE(chains_of_views) {
  check("permute -> slice -> reshape -> expand",
        [](const Inputs& in) {
          Tensor v = in[0].permute({1, 0, 2}).slice(0, 1, 3).reshape({2, 1, 8});
          return v.expand({2, 3, 8}) * 0.5;
        },
        {uniform({2, 3, 4}, -1.0, 1.0, 950)});
  check("transpose -> select -> unsqueeze -> flatten -> slice step",
        [](const Inputs& in) {
          return in[0].transpose(0, 2).select(1, -1).unsqueeze(0).flatten().slice(0, -7, 12, 2);
        },
        {uniform({2, 3, 4}, -1.0, 1.0, 951)});
  check("squeeze -> t -> slice -> sum",
        [](const Inputs& in) { return in[0].squeeze().t().slice(0, 1, 3).sum({1}); },
        {uniform({1, 3, 4}, -1.0, 1.0, 952)});
}

BOOST_AUTO_TEST_SUITE_END()
