// Elementwise ops against libm applied in plain loops: every unary op in f32, f64, f16 and bf16
// (half types computed in f32 and rounded once), integer inputs promoting to f32, special values;
// every binary op with broadcasting, scalar overloads and operators, mixed-dtype promotion,
// integer true division and integer pow, NaN propagation of maximum/minimum, comparisons,
// logical ops and where.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <numbers>

#include "support/reference.h"

using namespace kiln;
using namespace kiln::test;

namespace {

using UnaryFn = Tensor (*)(const Tensor&);
using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);

double ref_sigmoid(double x) {
  return 1 / (1 + std::exp(-x));
}
double ref_gelu(double x) {
  return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2));
}
double ref_gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

struct UnaryCase {
  const char* name;
  UnaryFn op;
  double (*ref)(double);
  double lo, hi;
};

const UnaryCase kUnaryCases[] = {
    {"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, -10, 10},
    {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::abs(x); }, -10, 10},
    {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, -20, 20},
    {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, 0.01,
     100},
    {"log1p", [](const Tensor& x) { return log1p(x); }, [](double x) { return std::log1p(x); },
     -0.9, 10},
    {"expm1", [](const Tensor& x) { return expm1(x); }, [](double x) { return std::expm1(x); }, -5,
     5},
    {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0,
     100},
    {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); },
     0.01, 100},
    {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, [](double x) { return 1 / x; },
     -10, 10},
    {"sin", [](const Tensor& x) { return sin(x); }, [](double x) { return std::sin(x); }, -10, 10},
    {"cos", [](const Tensor& x) { return cos(x); }, [](double x) { return std::cos(x); }, -10, 10},
    {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -10,
     10},
    {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, ref_sigmoid, -30, 30},
    {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0.0; }, -10,
     10},
    {"gelu", [](const Tensor& x) { return gelu(x); }, ref_gelu, -6, 6},
    {"gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApproximation::tanh); }, ref_gelu_tanh,
     -6, 6},
    {"silu", [](const Tensor& x) { return silu(x); }, [](double x) { return x * ref_sigmoid(x); },
     -30, 30},
    {"erf", [](const Tensor& x) { return erf(x); }, [](double x) { return std::erf(x); }, -4, 4},
    {"sign", [](const Tensor& x) { return sign(x); },
     [](double x) { return x > 0   ? 1.0
                           : x < 0 ? -1.0
                                   : 0.0; }, -10, 10},
};

// Runs `c` on 257 values (odd, so vectorized bodies and scalar tails both run) in `dtype`.
void check_unary(const UnaryCase& c, DType dtype) {
  auto in = round_to(dtype, host_random(257, c.lo, c.hi, 17));
  std::vector<double> want;
  for (double x : in) want.push_back(round_to(dtype, c.ref(x)));
  Tensor y = c.op(typed(dtype, in, {257}));
  BOOST_TEST(y.dtype() == dtype);
  check_close(y, {257}, want, rtol_for(dtype), atol_for(dtype));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_elementwise)

// ---- unary ----

BOOST_AUTO_TEST_CASE(unary_ops_match_libm_in_f32) {
  for (const auto& c : kUnaryCases) BOOST_TEST_CONTEXT(c.name) {
      check_unary(c, DType::f32);
    }
}

BOOST_AUTO_TEST_CASE(unary_ops_match_libm_in_f64) {
  for (const auto& c : kUnaryCases) BOOST_TEST_CONTEXT(c.name) {
      check_unary(c, DType::f64);
    }
}

BOOST_AUTO_TEST_CASE(unary_ops_in_half_types_compute_in_f32_and_round_once) {
  for (DType t : {DType::f16, DType::bf16})
    for (const auto& c : kUnaryCases) BOOST_TEST_CONTEXT(c.name << " in " << dtype_name(t)) {
        check_unary(c, t);
      }
}

BOOST_AUTO_TEST_CASE(unary_ops_on_a_transposed_input_follow_its_logical_order) {
  Tensor x = f64s({0, 1, 2, 3, 4, 5}, {2, 3}).t();
  std::vector<double> want;
  for (double v : {0, 3, 1, 4, 2, 5}) want.push_back(std::exp(v));
  check_close(exp(x), {3, 2}, want, 1e-14, 0);
}

BOOST_AUTO_TEST_CASE(float_ops_on_integer_and_bool_inputs_yield_f32) {
  Tensor i = i64s({0, 1, 2, 4});
  check_close(exp(i), {4}, round_to(DType::f32, {1, std::exp(1.0), std::exp(2.0), std::exp(4.0)}),
              1e-6, 0);
  BOOST_TEST(exp(i).dtype() == DType::f32);
  check_values(sqrt(i32s({0, 1, 4, 9}, {4})), {4}, DType::f32, {0, 1, 2, 3});
  check_values(sigmoid(bools({true, false}, {2})), {2}, DType::f32,
               {static_cast<float>(ref_sigmoid(1)), 0.5});
  check_values(reciprocal(i64s({2, 4})), {2}, DType::f32, {0.5, 0.25});
  check_close(gelu(i32s({1}, {1})), {1}, {ref_gelu(1)}, 1e-6, 0);
  BOOST_TEST(erf(i64s({0})).dtype() == DType::f32);
}

BOOST_AUTO_TEST_CASE(integer_unary_ops_keep_the_integer_dtype) {
  check_values(neg(i64s({3, -4, 0})), {3}, DType::i64, {-3, 4, 0});
  check_values(abs(i32s({3, -4, 0}, {3})), {3}, DType::i32, {3, 4, 0});
  check_values(relu(i64s({3, -4, 0})), {3}, DType::i64, {3, 0, 0});
  check_values(sign(i32s({3, -4, 0}, {3})), {3}, DType::i32, {1, -1, 0});
  check_values(-i64s({1}), {1}, DType::i64, {-1});
}

// Repeats `in` five times so that vectorized loops and scalar tails both see every value.
void check_special(UnaryFn op, DType t, std::vector<double> in, std::vector<double> want,
                   double rtol = 0, double atol = 0) {
  std::vector<double> x, w;
  for (int r = 0; r < 5; ++r) {
    x.insert(x.end(), in.begin(), in.end());
    w.insert(w.end(), want.begin(), want.end());
  }
  Tensor y = op(typed(t, x, {static_cast<std::int64_t>(x.size())}));
  check_close(y, {static_cast<std::int64_t>(x.size())}, w, rtol, atol);
}

BOOST_AUTO_TEST_CASE(unary_ops_handle_special_values) {
  const double inf = INFINITY, nan = NAN;
  for (DType t : {DType::f32, DType::f64}) {
    BOOST_TEST_CONTEXT(dtype_name(t)) {
      check_special([](const Tensor& x) { return exp(x); }, t, {-inf, inf, 0, nan},
                    {0, inf, 1, nan});
      check_special([](const Tensor& x) { return exp(x); }, t, {-100, -1000},
                    {round_to(t, std::exp(-100.0)), 0}, 0.05, 0);
      check_special([](const Tensor& x) { return expm1(x); }, t, {-inf, inf, -100}, {-1, inf, -1});
      check_special([](const Tensor& x) { return log(x); }, t, {0, -1, inf, 1},
                    {-inf, nan, inf, 0});
      check_special([](const Tensor& x) { return log1p(x); }, t, {-1, 0, -2}, {-inf, 0, nan});
      check_special([](const Tensor& x) { return sqrt(x); }, t, {-1, 0, inf}, {nan, 0, inf});
      check_special([](const Tensor& x) { return rsqrt(x); }, t, {0, inf, -1}, {inf, 0, nan});
      check_special([](const Tensor& x) { return reciprocal(x); }, t, {0, inf}, {inf, 0});
      check_special([](const Tensor& x) { return sigmoid(x); }, t, {-inf, inf, 0}, {0, 1, 0.5});
      check_special([](const Tensor& x) { return sigmoid(x); }, t, {-100, 100}, {0, 1}, 0, 1e-30);
      check_special([](const Tensor& x) { return tanh(x); }, t, {-inf, inf, -50, 50},
                    {-1, 1, -1, 1}, 1e-7, 0);
      check_special([](const Tensor& x) { return silu(x); }, t, {-100, 100}, {0, 100}, 1e-6, 1e-30);
      check_special([](const Tensor& x) { return gelu(x); }, t, {-10, 10}, {0, 10}, 1e-6, 1e-20);
      check_special([](const Tensor& x) { return erf(x); }, t, {-inf, inf, 0}, {-1, 1, 0});
      check_special([](const Tensor& x) { return expm1(x); }, t, {1e-10},
                    {std::expm1(round_to(t, 1e-10))}, 1e-6, 0);
      check_special([](const Tensor& x) { return log1p(x); }, t, {1e-10},
                    {std::log1p(round_to(t, 1e-10))}, 1e-6, 0);
      check_special([](const Tensor& x) { return abs(x); }, t, {-inf, nan, -0.0}, {inf, nan, 0});
      check_special([](const Tensor& x) { return sin(x); }, t, {inf, nan}, {nan, nan});
      // Large arguments need an accurate range reduction.
      std::vector<double> big = round_to(t, {1000.5, -12345.6, 1e5 + 0.25, 3e6});
      std::vector<double> sin_big, cos_big;
      for (double v : big) {
        sin_big.push_back(std::sin(v));
        cos_big.push_back(std::cos(v));
      }
      check_special([](const Tensor& x) { return sin(x); }, t, big, sin_big, 0, 2e-6);
      check_special([](const Tensor& x) { return cos(x); }, t, big, cos_big, 0, 2e-6);
    }
  }
}

BOOST_AUTO_TEST_CASE(relu_propagates_nan_at_every_position) {
  // Eight values so both a vectorized body and a scalar tail see a NaN.
  std::vector<float> v = {NAN, -1, 2, NAN, -3, 4, 5, NAN, -6};
  check_values(relu(f32s(v)), {9}, {NAN, 0, 2, NAN, 0, 4, 5, NAN, 0});
  check_values(relu(f64s({NAN, -1, 2, NAN, -3})), {5}, {NAN, 0, 2, NAN, 0});
}

BOOST_AUTO_TEST_CASE(logical_not_and_cast) {
  check_values(logical_not(f32s({0, 2, -0.5})), {3}, DType::bool_, {1, 0, 0});
  check_values(logical_not(i64s({0, 7})), {2}, DType::bool_, {1, 0});
  check_values(!bools({true, false}, {2}), {2}, DType::bool_, {0, 1});
  check_values(cast(f32s({1.7f, -1.7f, 0}), DType::i32), {3}, DType::i32, {1, -1, 0});
  check_values(cast(i64s({0, 3}), DType::bool_), {2}, DType::bool_, {0, 1});
  check_values(cast(f64s({1.0 / 3}), DType::bf16), {1}, DType::bf16,
               {static_cast<float>(bf16(1.0f / 3))});
  Tensor x = f32s({1, 2});
  BOOST_TEST(cast(x, DType::f32).same(x));
}

// ---- binary ----

struct BinaryCase {
  const char* name;
  BinaryFn op;
  double (*ref)(double, double);
  bool exact_in_f32;  // correctly rounded in f32, so the f64 reference rounded once is exact
};

const BinaryCase kArithCases[] = {
    {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); },
     [](double a, double b) { return a + b; }, true},
    {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); },
     [](double a, double b) { return a - b; }, true},
    {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); },
     [](double a, double b) { return a * b; }, true},
    {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); },
     [](double a, double b) { return a / b; }, true},
    {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
     [](double a, double b) { return std::pow(a, b); }, false},
    {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
     [](double a, double b) { return std::max(a, b); }, true},
    {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
     [](double a, double b) { return std::min(a, b); }, true},
};

// a [2, 1, 3] with b [4, 1] -> [2, 4, 3]: out[i, j, k] = f(a[i, 0, k], b[j, 0]).
std::vector<double> broadcast_reference(const std::vector<double>& a, const std::vector<double>& b,
                                        double (*f)(double, double)) {
  std::vector<double> out;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k) out.push_back(f(a[i * 3 + k], b[j]));
  return out;
}

BOOST_AUTO_TEST_CASE(arithmetic_ops_broadcast_2x1x3_with_4x1) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (const auto& c : kArithCases) {
      BOOST_TEST_CONTEXT(c.name << " in " << dtype_name(t)) {
        auto a = round_to(t, host_random(6, 0.1, 3, 1));
        auto b = round_to(t, host_random(4, 0.5, 2.5, 2));
        b[1] = -b[1];
        if (std::string(c.name) == "pow") b[1] = -1.5;  // keep the base positive
        auto want = round_to(t, broadcast_reference(a, b, c.ref));
        Tensor y = c.op(typed(t, a, {2, 1, 3}), typed(t, b, {4, 1}));
        BOOST_TEST(y.dtype() == t);
        if (t == DType::f32 && c.exact_in_f32)
          check_values(y, {2, 4, 3}, want);
        else
          check_close(y, {2, 4, 3}, want, rtol_for(t), atol_for(t));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(integer_arithmetic_is_exact_and_division_is_true_division) {
  Tensor a = i64s({7, -7, 1, 0}), b = i64s({2, 2, 3, 5});
  check_values(a + b, {4}, DType::i64, {9, -5, 4, 5});
  check_values(a - b, {4}, DType::i64, {5, -9, -2, -5});
  check_values(a * b, {4}, DType::i64, {14, -14, 3, 0});
  check_values(a / b, {4}, DType::f32, {3.5, -3.5, static_cast<float>(1.0 / 3), 0});
  check_values(i32s({1, 2}, {2}) / 4, {2}, DType::f32, {0.25, 0.5});
  check_values(maximum(a, b), {4}, DType::i64, {7, 2, 3, 5});
  check_values(minimum(a, b), {4}, DType::i64, {2, -7, 1, 0});
  check_values(i64s({1LL << 40}) * 4, {1}, DType::i64, {static_cast<double>(1LL << 42)});
}

BOOST_AUTO_TEST_CASE(integer_pow_uses_exact_integer_powers) {
  Tensor base = i64s({2, 3, -2, 0, 5, 1});
  Tensor e = i64s({10, 3, 3, 0, 0, 62});
  check_values(pow(base, e), {6}, DType::i64, {1024, 27, -8, 1, 1, 1});
  check_values(pow(i64s({3}), i64s({39})), {1}, DType::i64, {4052555153018976267.0});
  BOOST_TEST(pow(i64s({3}), i64s({39})).item<std::int64_t>() == 4052555153018976267LL);
  check_values(pow(i32s({2, 3}, {2}), 2), {2}, DType::i32, {4, 9});
  check_values(pow(2, i64s({0, 5})), {2}, DType::i64, {1, 32});
  check_values(pow(i64s({4}), 0.5), {1}, DType::f32, {2});
}

BOOST_AUTO_TEST_CASE(float_pow_handles_negative_bases_with_integral_exponents) {
  check_values(pow(f32s({-2, -2, -8, 0, 4}), f32s({3, 2, 1.0f / 3, 0, -0.5f})), {5},
               {-8, 4, NAN, 1, 0.5});
  check_values(pow(f64s({-3}), 3.0), {1}, {-27});
  check_values(f32s({3}).pow(2), {1}, {9});
}

BOOST_AUTO_TEST_CASE(maximum_and_minimum_propagate_nan_from_either_side) {
  Tensor a = f32s({NAN, 1, 5, NAN, -1, 2, 3, 4, NAN});
  Tensor b = f32s({1, NAN, 2, NAN, -2, 3, NAN, 0, 0});
  check_values(maximum(a, b), {9}, {NAN, NAN, 5, NAN, -1, 3, NAN, 4, NAN});
  check_values(minimum(a, b), {9}, {NAN, NAN, 2, NAN, -2, 2, NAN, 0, NAN});
  check_values(maximum(f64s({NAN, 1}), 0.0), {2}, {NAN, 1});
  check_values(minimum(0.0, f64s({2, NAN})), {2}, {0, NAN});
}

BOOST_AUTO_TEST_CASE(comparisons_broadcast_and_yield_bool) {
  // a [2, 1, 3] with b [4, 1] from a small value set so that ties occur.
  std::vector<double> a = {0, 1, 2, 2, 1, 0}, b = {1, 0, 2, 1};
  Tensor ta = typed(DType::f32, a, {2, 1, 3}), tb = typed(DType::i64, b, {4, 1});
  struct Cmp {
    const char* name;
    BinaryFn op;
    double (*ref)(double, double);
  } cases[] = {
      {"eq", [](const Tensor& x, const Tensor& y) { return eq(x, y); },
       [](double x, double y) { return double(x == y); }},
      {"ne", [](const Tensor& x, const Tensor& y) { return ne(x, y); },
       [](double x, double y) { return double(x != y); }},
      {"lt", [](const Tensor& x, const Tensor& y) { return lt(x, y); },
       [](double x, double y) { return double(x < y); }},
      {"le", [](const Tensor& x, const Tensor& y) { return le(x, y); },
       [](double x, double y) { return double(x <= y); }},
      {"gt", [](const Tensor& x, const Tensor& y) { return gt(x, y); },
       [](double x, double y) { return double(x > y); }},
      {"ge", [](const Tensor& x, const Tensor& y) { return ge(x, y); },
       [](double x, double y) { return double(x >= y); }},
  };
  for (const auto& c : cases) {
    BOOST_TEST_CONTEXT(c.name) {
      check_values(c.op(ta, tb), {2, 4, 3}, DType::bool_, broadcast_reference(a, b, c.ref));
    }
  }
  // Compared in the promoted dtype: 0.5 is not truncated to 0.
  check_values(eq(i64s({0, 1}), f32s({0.5f, 1})), {2}, DType::bool_, {0, 1});
  check_values(f32s({1, NAN}) == f32s({1, NAN}), {2}, {1, 0});
  check_values(f32s({1, NAN}) != f32s({1, NAN}), {2}, {0, 1});
  check_values(bools({true, false}, {2}) == bools({true, true}, {2}), {2}, {1, 0});
  check_values(lt(typed(DType::f16, {1, 2}, {2}), typed(DType::bf16, {2, 2}, {2})), {2}, {1, 0});
}

BOOST_AUTO_TEST_CASE(logical_ops_treat_nonzero_as_true) {
  Tensor a = bools({true, true, false, false}, {4}), b = bools({true, false, true, false}, {4});
  check_values(logical_and(a, b), {4}, DType::bool_, {1, 0, 0, 0});
  check_values(logical_or(a, b), {4}, DType::bool_, {1, 1, 1, 0});
  check_values(a && b, {4}, {1, 0, 0, 0});
  check_values(a || b, {4}, {1, 1, 1, 0});
  check_values(logical_and(f32s({0, 2, -1}), i64s({5, 0, 3})), {3}, DType::bool_, {0, 0, 1});
  check_values(logical_or(f32s({0, 0}, {2, 1}), bools({false, true}, {2})), {2, 2}, {0, 1, 0, 1});
}

BOOST_AUTO_TEST_CASE(scalar_overloads_and_operators_match_hand_values) {
  Tensor x = f32s({1, 2, 4});
  check_values(x + 1, {3}, {2, 3, 5});
  check_values(1 + x, {3}, {2, 3, 5});
  check_values(x - 1, {3}, {0, 1, 3});
  check_values(10 - x, {3}, {9, 8, 6});
  check_values(x * 3, {3}, {3, 6, 12});
  check_values(0.5 * x, {3}, {0.5, 1, 2});
  check_values(x / 4, {3}, {0.25, 0.5, 1});
  check_values(1 / x, {3}, {1, 0.5, 0.25});
  check_values(pow(x, 2), {3}, {1, 4, 16});
  check_values(pow(2, x), {3}, {2, 4, 16});
  check_values(-x, {3}, {-1, -2, -4});
  check_values(x > 1.5, {3}, DType::bool_, {0, 1, 1});
  check_values(x >= 2, {3}, {0, 1, 1});
  check_values(x < 2, {3}, {1, 0, 0});
  check_values(x <= 2, {3}, {1, 1, 0});
  check_values(x == 2, {3}, {0, 1, 0});
  check_values(x != 2, {3}, {1, 0, 1});
  check_values(3 > x, {3}, {1, 1, 0});
  check_values(x + x * x - x / x, {3}, {1, 5, 19});
  check_values(maximum(x, 2), {3}, {2, 2, 4});
  check_values(minimum(3, x), {3}, {1, 2, 3});
  BOOST_TEST((x * 0.5).dtype() == DType::f32);
  BOOST_TEST((f64s({1}) * 0.5).dtype() == DType::f64);
}

BOOST_AUTO_TEST_CASE(mixed_dtype_operands_promote_and_compute_in_the_result_dtype) {
  check_values(i32s({1, 2}, {2}) + f64s({0.25, 0.5}), {2}, DType::f64, {1.25, 2.5});
  check_values(i64s({3}) * typed(DType::f16, {0.5}, {1}), {1}, DType::f16, {1.5});
  check_values(bools({true, false}, {2}) + i32s({5, 5}, {2}), {2}, DType::i32, {6, 5});
  check_values(i32s({1 << 30}, {1}) + i64s({1LL << 40}), {1}, DType::i64,
               {static_cast<double>((1LL << 30) + (1LL << 40))});
  // f16 + bf16 -> f32, computed from the exact half values.
  Tensor h = typed(DType::f16, {0.1}, {1}), b = typed(DType::bf16, {0.1}, {1});
  double want = static_cast<float>(static_cast<float>(f16(0.1f)) + static_cast<float>(bf16(0.1f)));
  check_values(h + b, {1}, DType::f32, {want});
  // f32 + f64 keeps f64 precision for the f64 operand.
  check_values(f32s({1}) + f64s({1e-10}), {1}, DType::f64, {1 + 1e-10});
  // f16 results are rounded once: 2049 is not an f16, 2048 + 1 rounds to even.
  check_values(typed(DType::f16, {2048}, {1}) + 1, {1}, DType::f16, {2048});
  check_values(typed(DType::f16, {2048}, {1}) + 3, {1}, DType::f16, {2052});
}

BOOST_AUTO_TEST_CASE(binary_ops_on_non_contiguous_operands) {
  Tensor a = f32s({1, 2, 3, 4, 5, 6}, {2, 3}).t();                   // [[1, 4], [2, 5], [3, 6]]
  Tensor b = f32s({10, 20, 30, 40, 50, 60}, {3, 2}).slice(1, 1, 2);  // [[20], [40], [60]]
  check_values(a + b, {3, 2}, {21, 24, 42, 45, 63, 66});
  check_values(a * a.slice(0, 0, 3, 2).slice(0, 0, 1), {3, 2}, {1, 16, 2, 20, 3, 24});
}

BOOST_AUTO_TEST_CASE(where_selects_with_broadcasting_and_promotion) {
  Tensor cond = bools({true, false}, {2, 1});
  Tensor a = f32s({1, 2, 3}, {1, 3});
  Tensor b = scalar_tensor(-1, DType::f64);
  check_values(where(cond, a, b), {2, 3}, DType::f64, {1, 2, 3, -1, -1, -1});
  check_values(where(cond, a, 0.0), {2, 3}, DType::f32, {1, 2, 3, 0, 0, 0});
  check_values(where(cond, 7.0, a), {2, 3}, DType::f32, {7, 7, 7, 1, 2, 3});
  check_values(where(bools({true, false, true}, {3}), i64s({1, 2, 3}), i64s({-1, -2, -3})), {3},
               DType::i64, {1, -2, 3});
  Tensor x = f32s({-2, NAN, 3});
  check_values(where(x > 0, x, zeros_like(x)), {3}, {0, 0, 3});
  check_values(where(bools({false, true}, {2}), typed(DType::f16, {1, 2}, {2}),
                     typed(DType::bf16, {3, 4}, {2})),
               {2}, DType::f32, {3, 2});
}

BOOST_AUTO_TEST_CASE(arithmetic_on_bool_tensors_is_rejected) {
  Tensor a = bools({true, false}, {2});
  BOOST_CHECK_EXCEPTION(a + a, DTypeError, message_has({"add", "bool"}));
  BOOST_CHECK_EXCEPTION(a * a, DTypeError, message_has({"mul", "bool"}));
  BOOST_CHECK_EXCEPTION(neg(a), DTypeError, message_has({"neg", "bool"}));
}

BOOST_AUTO_TEST_SUITE_END()
