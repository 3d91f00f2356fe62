// Elementwise ops with PyTorch's or Python's rules at their edges, against hand tables, libm
// and plain loops: clamp (scalar and tensor bounds), floor/ceil/round/trunc, remainder and
// floor_divide (Python's rules), square, softplus, leaky_relu, masked_fill and tril/triu, over
// f32/f64/f16/bf16/i32/i64/bool where the op allows, with NaN, infinities, negative zero, empty,
// 0-d and non-contiguous inputs. Reductions, scans and contractions along dims are in
// test_ops_along_dims.cpp; the gradients in test_gradcheck_elementwise_rules.cpp.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <limits>

#include "support/reference.h"

using namespace kiln;
using namespace kiln::test;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
const DType kFloating[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

// Checks that every element of `got` has the sign bit `want_negative` says (for signed zeros).
void check_signbits(const Tensor& got, const std::vector<bool>& want_negative) {
  auto v = got.to_vector<double>();
  BOOST_TEST_REQUIRE(v.size() == want_negative.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    BOOST_TEST(std::signbit(v[i]) == want_negative[i], "element " << i << " = " << v[i]);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_elementwise_rules)

BOOST_AUTO_TEST_CASE(clamp_with_number_bounds_matches_a_hand_table) {
  const std::vector<double> x = {-3, -1, -0.5, 0, 0.5, 1, 3, kNaN, -kInf, kInf};
  for (DType t : kFloating) {
    BOOST_TEST_CONTEXT(dtype_name(t)) {
      Tensor xt = typed(t, x, {10});
      check_values(clamp(xt, -1.0, 1.0), {10}, t, {-1, -1, -0.5, 0, 0.5, 1, 1, kNaN, -1, 1});
      check_values(clamp(xt, -1.0), {10}, t, {-1, -1, -0.5, 0, 0.5, 1, 3, kNaN, -1, kInf});
      check_values(clamp(xt, std::nullopt, 0.5), {10}, t,
                   {-3, -1, -0.5, 0, 0.5, 0.5, 0.5, kNaN, -kInf, 0.5});
      check_values(clamp_min(xt, 0), {10}, t, {0, 0, 0, 0, 0.5, 1, 3, kNaN, 0, kInf});
      check_values(clamp_max(xt, 0), {10}, t, {-3, -1, -0.5, 0, 0, 0, 0, kNaN, -kInf, 0});
      // min > max: everything becomes max, as in PyTorch.
      check_values(clamp(xt, 2.0, 1.0), {10}, t, {1, 1, 1, 1, 1, 1, 1, kNaN, 1, 1});
    }
  }
}

BOOST_AUTO_TEST_CASE(clamp_propagates_nan_from_its_bounds_as_pytorch) {
  Tensor x = f32s({-1, 0.5, NAN, 3}, {4});
  check_values(clamp(x, kNaN), {4}, {kNaN, kNaN, kNaN, kNaN});
  check_values(clamp(x, std::nullopt, kNaN), {4}, {kNaN, kNaN, kNaN, kNaN});
  check_values(clamp(x, 0.0, kNaN), {4}, {kNaN, kNaN, kNaN, kNaN});
  check_values(clamp_min(x, kNaN), {4}, {kNaN, kNaN, kNaN, kNaN});
  // Tensor bounds: NaN only where the bound is NaN.
  Tensor lo = f32s({NAN, 0, 0, 0}, {4}), hi = f32s({1, 1, 1, NAN}, {4});
  check_values(clamp(x, lo, hi), {4}, {kNaN, 0.5, kNaN, kNaN});
  check_values(clamp(x, lo, Tensor()), {4}, {kNaN, 0.5, kNaN, 3});
  check_values(clamp(x, Tensor(), hi), {4}, {-1, 0.5, kNaN, kNaN});
}

BOOST_AUTO_TEST_CASE(clamp_of_integers_keeps_the_dtype) {
  for (DType t : {DType::i32, DType::i64}) {
    Tensor x = typed(t, {-5, -2, 0, 2, 5}, {5});
    check_values(clamp(x, -2, 3), {5}, t, {-2, -2, 0, 2, 3});
    check_values(clamp_max(x, -3), {5}, t, {-5, -3, -3, -3, -3});
  }
}

BOOST_AUTO_TEST_CASE(clamp_with_tensor_bounds_broadcasts) {
  Tensor x = f32s({-2, 0, 2, -2, 0, 2}, {2, 3});
  Tensor lo = f32s({-1, 1, -3}, {3});  // per column
  Tensor hi = f32s({0, 1}, {2, 1});    // per row
  check_values(clamp(x, lo, hi), {2, 3}, {-1, 0, 0, -1, 1, 1});
  check_values(clamp(x, lo, Tensor()), {2, 3}, {-1, 1, 2, -1, 1, 2});
  check_values(clamp(x, Tensor(), hi), {2, 3}, {-2, 0, 0, -2, 0, 1});
}

BOOST_AUTO_TEST_CASE(clamp_of_non_contiguous_and_empty_inputs) {
  Tensor x = f64s({1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1);  // [[1,4],[2,5],[3,6]]
  check_values(clamp(x, 2.0, 5.0), {3, 2}, {2, 4, 2, 5, 3, 5});
  check_values(clamp(zeros({0, 3}), 0.0, 1.0), {0, 3}, {});
  check_values(clamp(scalar_tensor(7.0), 0.0, 1.0), {}, {1});
}

BOOST_AUTO_TEST_CASE(rounding_ops_match_a_hand_table) {
  const std::vector<double> x = {0.5,   1.5, 2.5,  -0.5, -1.5, -2.5, 0.25,
                                 -0.75, 2.0, -0.0, kNaN, kInf, -kInf};
  const std::vector<double> floor_want = {0, 1, 2, -1, -2, -3, 0, -1, 2, -0.0, kNaN, kInf, -kInf};
  const std::vector<double> ceil_want = {1,    2, 3,    -0.0, -1,   -2,   1,
                                         -0.0, 2, -0.0, kNaN, kInf, -kInf};
  // Ties go to the even neighbour (PyTorch's round), not away from zero as std::round does.
  const std::vector<double> round_want = {0, 2, 2, -0.0, -2, -2, 0, -1, 2, -0.0, kNaN, kInf, -kInf};
  const std::vector<double> trunc_want = {0,    1, 2,    -0.0, -1,   -2,   0,
                                          -0.0, 2, -0.0, kNaN, kInf, -kInf};
  auto negative = [](const std::vector<double>& v) {
    std::vector<bool> out;
    for (double d : v) out.push_back(std::signbit(d));
    return out;
  };
  for (DType t : kFloating) {
    BOOST_TEST_CONTEXT(dtype_name(t)) {
      Tensor xt = typed(t, x, {13});
      check_values(floor(xt), {13}, t, floor_want);
      check_values(ceil(xt), {13}, t, ceil_want);
      check_values(round(xt), {13}, t, round_want);
      check_values(trunc(xt), {13}, t, trunc_want);
      check_signbits(ceil(xt), negative(ceil_want));
      check_signbits(round(xt), negative(round_want));
      check_signbits(trunc(xt), negative(trunc_want));
    }
  }
}

BOOST_AUTO_TEST_CASE(rounding_ops_near_the_limits_of_precision) {
  // 0.49999997f is the largest f32 below 0.5: round must not add 0.5 and truncate (giving 1).
  Tensor x = f32s({0.49999997f, 8388609.0f, -8388609.0f, 1e30f}, {4});
  check_values(round(x), {4}, {0, 8388609, -8388609, 1e30f});
  check_values(floor(f64s({4503599627370497.0, -1e-300})), {2}, {4503599627370497.0, -1});
  // Random values against libm (an independent implementation).
  auto v = as_f32(host_random(64, -50, 50, 3));
  std::vector<double> fl, ce, tr;
  for (double d : v) {
    fl.push_back(std::floor(d));
    ce.push_back(std::ceil(d));
    tr.push_back(std::trunc(d));
  }
  Tensor xv = typed(DType::f32, v, {8, 8}).transpose(0, 1);
  Tensor want_layout = typed(DType::f32, v, {8, 8});
  check_values(floor(xv).transpose(0, 1).contiguous(), {8, 8}, fl);
  check_values(ceil(want_layout), {8, 8}, ce);
  check_values(trunc(want_layout), {8, 8}, tr);
}

BOOST_AUTO_TEST_CASE(rounding_integers_passes_them_through_and_bool_is_rejected) {
  for (DType t : {DType::i32, DType::i64}) {
    Tensor x = typed(t, {-3, 0, 7}, {3});
    for (auto op : {&kiln::floor, &kiln::ceil, &kiln::round, &kiln::trunc})
      check_values(op(x), {3}, t, {-3, 0, 7});
  }
  Tensor b = bools({true, false}, {2});
  KILN_CHECK_THROWS(floor(b), DTypeError, "floor", "bool");
  KILN_CHECK_THROWS(round(b), DTypeError, "round", "bool");
  check_values(floor(zeros({0})), {0}, {});
  check_values(round(scalar_tensor(-2.5)), {}, {-2});
}

BOOST_AUTO_TEST_CASE(remainder_takes_the_divisors_sign_like_python) {
  // Python: 5 % 3, -5 % 3, 5 % -3, -5 % -3, 0 % 3, 6 % 3, -6 % 3.
  Tensor a = i64s({5, -5, 5, -5, 0, 6, -6});
  Tensor b = i64s({3, 3, -3, -3, 3, 3, 3});
  check_values(remainder(a, b), {7}, DType::i64, {2, 1, -1, -2, 0, 0, 0});
  check_values(a % 4, {7}, DType::i64, {1, 3, 1, 3, 0, 2, 2});
  check_values(remainder(7, i32s({2, -2, 5, -5}, {4})), {4}, DType::i32, {1, -1, 2, -3});
  // INT_MIN % -1 is 0 (and must not trap).
  const auto lo64 = std::numeric_limits<std::int64_t>::min();
  BOOST_TEST(remainder(i64s({lo64}), -1).to_vector<std::int64_t>()[0] == 0);
  const auto lo32 = std::numeric_limits<std::int32_t>::min();
  BOOST_TEST(remainder(i32s({lo32}, {1}), -1).to_vector<std::int32_t>()[0] == 0);
}

BOOST_AUTO_TEST_CASE(remainder_of_floats_matches_python) {
  // Python: 5.5 % 2, -5.5 % 2, 5.5 % -2, -5.5 % -2, 5 % inf, -5 % inf, 1 % 0, inf % 2, nan % 2.
  const std::vector<double> a = {5.5, -5.5, 5.5, -5.5, 5, -5, 1, kInf, kNaN};
  const std::vector<double> b = {2, 2, -2, -2, kInf, kInf, 0, 2, 2};
  const std::vector<double> want = {1.5, 0.5, -0.5, -1.5, 5, kInf, kNaN, kNaN, kNaN};
  for (DType t : kFloating) {
    BOOST_TEST_CONTEXT(dtype_name(t)) {
      check_values(remainder(typed(t, a, {9}), typed(t, b, {9})), {9}, t, want);
    }
  }
  // Mixed dtypes promote; a number keeps the tensor's dtype.
  check_values(remainder(i64s({-7}), f64s({2.5})), {1}, DType::f64, {0.5});
  check_values(remainder(f32s({-7}), 3), {1}, DType::f32, {2});
}

BOOST_AUTO_TEST_CASE(floor_divide_of_integers_rounds_toward_negative_infinity) {
  Tensor a = i64s({7, -7, 7, -7, 0, 6, -6, 1});
  Tensor b = i64s({2, 2, -2, -2, 5, 3, 3, -1});
  check_values(floor_divide(a, b), {8}, DType::i64, {3, -4, -4, 3, 0, 2, -2, -1});
  check_values(floor_divide(i32s({-1, -9, 9}, {3}), 4), {3}, DType::i32, {-1, -3, 2});
  // INT_MIN // -1 overflows and wraps to INT_MIN (two's complement), as PyTorch does.
  const auto lo64 = std::numeric_limits<std::int64_t>::min();
  BOOST_TEST(floor_divide(i64s({lo64}), -1).to_vector<std::int64_t>()[0] == lo64);
  const auto lo32 = std::numeric_limits<std::int32_t>::min();
  BOOST_TEST(floor_divide(i32s({lo32}, {1}), -1).to_vector<std::int32_t>()[0] == lo32);
}

BOOST_AUTO_TEST_CASE(integer_division_by_zero_is_an_error) {
  KILN_CHECK_THROWS(floor_divide(i64s({3, 4}), i64s({1, 0})), Error, "floor_divide", "zero", "4");
  KILN_CHECK_THROWS(floor_divide(i32s({5}, {1}), 0), Error, "floor_divide", "zero");
  KILN_CHECK_THROWS(remainder(i64s({3}), 0), Error, "remainder", "zero", "3");
}

BOOST_AUTO_TEST_CASE(floor_divide_of_floats_matches_python) {
  // Python: 7.5 // 2, -7.5 // 2, 7.5 // -2, 1 // 0.1 (0.1 is slightly above 1/10, so 9, not 10),
  // 0 // -3 (-0.0), 0.5 // -3 (-1), 1 // 0, -1 // 0, 0 // 0, inf // 2.
  const std::vector<double> a = {7.5, -7.5, 7.5, 1, 0, 0.5, 1, -1, 0, kInf};
  const std::vector<double> b = {2, 2, -2, 0.1, -3, -3, 0, 0, 0, 2};
  const std::vector<double> want = {3, -4, -4, 9, -0.0, -1, kInf, -kInf, kNaN, kNaN};
  Tensor got = floor_divide(f64s(a), f64s(b));
  check_values(got, {10}, DType::f64, want);
  BOOST_TEST(std::signbit(got.to_vector<double>()[4]));
  // f32 and the half types: the same table, where the operands are exact.
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    BOOST_TEST_CONTEXT(dtype_name(t)) {
      check_values(floor_divide(typed(t, {7.5, -7.5, 7.5, -1}, {4}), typed(t, {2, 2, -2, 0}, {4})),
                   {4}, t, {3, -4, -4, -kInf});
    }
  }
  // Against the defining property on random operands: q = floor(a / b) computed in long double.
  auto av = host_random(50, -100, 100, 5), bv = host_random(50, -10, 10, 6);
  std::vector<double> q;
  for (std::size_t i = 0; i < av.size(); ++i)
    q.push_back(static_cast<double>(std::floor(static_cast<long double>(av[i]) / bv[i])));
  check_values(floor_divide(f64s(av), f64s(bv)), {50}, q);
}

BOOST_AUTO_TEST_CASE(square_matches_hand_values) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    BOOST_TEST_CONTEXT(dtype_name(t)) {
      check_values(square(typed(t, {-3, 0, 2, 5}, {2, 2})), {2, 2}, t, {9, 0, 4, 25});
    }
  }
  check_values(square(f64s({-0.0, kNaN, -kInf, 1e200})), {4}, {0, kNaN, kInf, kInf});
  check_values(square(f64s({1, 2, 3, 4, 5, 6}, {2, 3}).slice(1, 0, 3, 2)), {2, 2}, {1, 9, 16, 36});
}

BOOST_AUTO_TEST_CASE(softplus_matches_the_formula_and_the_threshold) {
  auto ref = [](double x, double beta, double threshold) {
    return x * beta > threshold ? x : std::log1p(std::exp(x * beta)) / beta;
  };
  const std::vector<double> x = {-30, -2, -0.5, 0, 0.5, 2, 9.5, 10.5, 25};
  for (auto [beta, threshold] : {std::pair{1.0, 20.0}, {2.0, 20.0}, {0.5, 1.0}, {1.0, 10.0}}) {
    std::vector<double> want;
    for (double v : x) want.push_back(ref(v, beta, threshold));
    BOOST_TEST_CONTEXT("beta " << beta << " threshold " << threshold) {
      check_close(softplus(f64s(x), beta, threshold), {9}, want, 1e-14, 1e-300);
      check_close(softplus(typed(DType::f32, x, {9}), beta, threshold), {9}, want, 4e-6, 1e-30);
    }
  }
  // Exactly linear past the threshold: 10.5 stays 10.5, not log1p(exp(10.5)) = 10.500028.
  BOOST_TEST(softplus(f64s({10.5}), 1.0, 10.0).item() == 10.5);
  // Large inputs do not overflow; very negative ones underflow gracefully to exp(x).
  check_close(softplus(f64s({1000, -700})), {2}, {1000, std::exp(-700.0)}, 1e-12, 0);
  check_values(softplus(f64s({kNaN, -kInf, kInf})), {3}, {kNaN, 0, kInf});
  // Half types compute in f32 and round once; integers give f32.
  for (DType t : {DType::f16, DType::bf16}) {
    std::vector<double> xs = round_to(t, std::vector<double>{-2, -0.5, 0, 0.5, 3});
    std::vector<double> want;
    for (double v : xs) want.push_back(round_to(t, ref(v, 1, 20)));
    check_values(softplus(typed(t, xs, {5})), {5}, t, want);
  }
  check_close(softplus(i64s({0, 1})), {2}, {std::log(2.0), std::log1p(std::exp(1.0))}, 4e-6, 0);
  BOOST_TEST(softplus(i64s({0, 1})).dtype() == DType::f32);
  check_close(softplus(scalar_tensor(0.0, DType::f64)), {}, {std::log(2.0)}, 1e-15, 0);
}

BOOST_AUTO_TEST_CASE(leaky_relu_scales_the_negative_side) {
  const std::vector<double> x = {-4, -1, -0.0, 0, 2, kNaN, -kInf, kInf};
  for (DType t : kFloating) {
    BOOST_TEST_CONTEXT(dtype_name(t)) {
      check_values(leaky_relu(typed(t, x, {8}), 0.25), {8}, t,
                   {-1, -0.25, -0.0, 0, 2, kNaN, -kInf, kInf});
    }
  }
  check_close(leaky_relu(f64s({-3, 3})), {2}, {-0.03, 3}, 1e-15, 0);
  // Half types: x * slope computed in f32 and rounded once (the slope is not rounded to f16
  // first, as PyTorch's opmath does).
  for (DType t : {DType::f16, DType::bf16}) {
    auto xs = round_to(t, host_random(64, -8, 0, 7));
    std::vector<double> want;
    for (double v : xs) want.push_back(round_to(t, static_cast<float>(v) * 0.01f));
    BOOST_TEST_CONTEXT(dtype_name(t)) {
      check_values(leaky_relu(typed(t, xs, {64})), {64}, t, want);
    }
  }
  // A slope above 1 and a negative slope are allowed, as in PyTorch.
  check_values(leaky_relu(f64s({-2, 2}), 1.5), {2}, {-3, 2});
  check_values(leaky_relu(f64s({-2, 2}), -1), {2}, {2, 2});
  check_values(leaky_relu(f64s({-1, 1, -2, 2}, {2, 2}).transpose(0, 1), 0.5), {2, 2},
               {-0.5, -1, 1, 2});
  check_values(leaky_relu(zeros({0, 2})), {0, 2}, {});
  KILN_CHECK_THROWS(leaky_relu(i64s({1})), DTypeError, "leaky_relu", "i64");
}

BOOST_AUTO_TEST_CASE(masked_fill_broadcasts_the_mask_and_casts_the_value) {
  Tensor x = f32s({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor row_mask = bools({true, false, true}, {3});
  check_values(masked_fill(x, row_mask, -1.5), {2, 3}, DType::f32, {-1.5, 2, -1.5, -1.5, 5, -1.5});
  check_values(masked_fill(x, bools({false, true}, {2, 1}), kNaN), {2, 3},
               {1, 2, 3, kNaN, kNaN, kNaN});
  check_values(masked_fill(x, bools({true}, {}), -kInf), {2, 3},
               {-kInf, -kInf, -kInf, -kInf, -kInf, -kInf});
  // A 0-d tensor value, of another dtype: cast to x's dtype.
  check_values(masked_fill(x, row_mask, scalar_tensor(7, DType::f64)), {2, 3}, DType::f32,
               {7, 2, 7, 7, 5, 7});
  // An integer tensor truncates a fractional value; bool tensors take a bool.
  check_values(masked_fill(i64s({1, 2, 3}), bools({false, true, true}, {3}), 2.7), {3}, DType::i64,
               {1, 2, 2});
  // The extremes of the integer range fit.
  auto lo = masked_fill(i32s({0, 0}, {2}), bools({true, false}, {2}), -2147483648.0);
  BOOST_TEST(lo.to_vector<std::int32_t>()[0] == std::numeric_limits<std::int32_t>::min());
  check_values(masked_fill(bools({true, false}, {2}), bools({true, true}, {2}), false), {2},
               DType::bool_, {0, 0});
  // Half types and a transposed input.
  check_values(masked_fill(typed(DType::bf16, {1, 2}, {2}), bools({false, true}, {2}), 0.1), {2},
               DType::bf16, {1, round_to(DType::bf16, 0.1)});
  Tensor xt = f64s({1, 2, 3, 4}, {2, 2}).transpose(0, 1);  // [[1,3],[2,4]]
  check_values(masked_fill(xt, bools({true, false, false, true}, {2, 2}), 0), {2, 2}, {0, 3, 2, 0});
  check_values(masked_fill(zeros({0, 3}), row_mask, 1), {0, 3}, {});
}

BOOST_AUTO_TEST_CASE(tril_and_triu_keep_the_band_of_each_diagonal_offset) {
  // Reference: keep (i, j) when j - i <= k (tril) or j - i >= k (triu), for wide, tall and square.
  for (auto shape : {Shape{3, 4}, Shape{4, 3}, Shape{3, 3}, Shape{2, 3, 2}}) {
    std::int64_t rows = shape[shape.size() - 2], cols = shape.back(), n = numel(shape);
    std::vector<double> x(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) x[i] = static_cast<double>(i + 1);
    for (std::int64_t k : {-5, -2, -1, 0, 1, 2, 5}) {
      std::vector<double> lo(x), up(x);
      for (std::int64_t e = 0; e < n; ++e) {
        std::int64_t i = (e / cols) % rows, j = e % cols;
        if (j - i > k) lo[e] = 0;
        if (j - i < k) up[e] = 0;
      }
      BOOST_TEST_CONTEXT(shape_str(shape) << " diagonal " << k) {
        for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
          check_values(tril(typed(t, x, shape), k), shape, t, lo);
          check_values(triu(typed(t, x, shape), k), shape, t, up);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(tril_and_triu_of_bool_views_and_empty_matrices) {
  // Bool masks are what tril is most used for (causal attention), as torch.tril allows.
  Tensor ones_mask = bools(std::vector<bool>(9, true), {3, 3});
  check_values(tril(ones_mask), {3, 3}, DType::bool_, {1, 0, 0, 1, 1, 0, 1, 1, 1});
  check_values(triu(ones_mask, 1), {3, 3}, DType::bool_, {0, 1, 1, 0, 0, 1, 0, 0, 0});
  // A transposed view: the triangle is of the view, not of the storage.
  Tensor x =
      f64s({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3}).transpose(0, 1);  // [[1,4,7],[2,5,8],[3,6,9]]
  check_values(tril(x), {3, 3}, {1, 0, 0, 2, 5, 0, 3, 6, 9});
  check_values(triu(x, -1), {3, 3}, {1, 4, 7, 2, 5, 8, 0, 6, 9});
  // NaN above the diagonal is dropped, not propagated (a select, not a multiply by 0).
  check_values(tril(f64s({1, kNaN, kInf, 2}, {2, 2})), {2, 2}, {1, 0, kInf, 2});
  check_values(tril(zeros({0, 3})), {0, 3}, {});
  check_values(triu(zeros({2, 0, 3})), {2, 0, 3}, {});
}

BOOST_AUTO_TEST_SUITE_END()
