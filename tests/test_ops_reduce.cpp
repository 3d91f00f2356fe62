// Reductions against plain host loops: sum, mean, prod, amax/max, amin/min, argmax/argmin (ties
// keep the first), var/std with correction 0 and 1, logsumexp (overflow-safe, -inf rows), over
// one dim, several dims, all dims and negative dims, with and without keepdim, on transposed and
// sliced inputs; integer sums widen to i64, f16 sums accumulate in f32; size-0 dims.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "support/reference.h"

using namespace kiln;
using namespace kiln::test;

namespace {

using HostReduce = std::function<double(const std::vector<double>&)>;

// Reduces the row-major `values` of `shape` over `dims` (non-negative) with `fn`; the result is
// in row-major order of the kept dims.
std::vector<double> host_reduce(const std::vector<double>& values, const Shape& shape,
                                const std::vector<std::int64_t>& dims, const HostReduce& fn) {
  Shape kept = shape;
  for (auto d : dims) kept[d] = 1;
  std::vector<double> out;
  for (std::int64_t o = 0; o < numel(kept); ++o) {
    auto base = unflatten(kept, o);
    std::vector<double> group;
    for (std::int64_t i = 0; i < numel(shape); ++i) {
      auto idx = unflatten(shape, i);
      bool match = true;
      for (std::size_t d = 0; d < shape.size(); ++d)
        if (std::find(dims.begin(), dims.end(), static_cast<std::int64_t>(d)) == dims.end() &&
            idx[d] != base[d])
          match = false;
      if (match) group.push_back(values[i]);
    }
    out.push_back(fn(group));
  }
  return out;
}

Shape reduced(const Shape& shape, const std::vector<std::int64_t>& dims, bool keepdim) {
  Shape out;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    bool r = std::find(dims.begin(), dims.end(), static_cast<std::int64_t>(d)) != dims.end();
    if (!r)
      out.push_back(shape[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

double host_sum(const std::vector<double>& g) {
  double s = 0;
  for (double v : g) s += v;
  return s;
}
double host_mean(const std::vector<double>& g) {
  return host_sum(g) / g.size();
}
double host_prod(const std::vector<double>& g) {
  double p = 1;
  for (double v : g) p *= v;
  return p;
}
double host_max(const std::vector<double>& g) {
  return *std::max_element(g.begin(), g.end());
}
double host_min(const std::vector<double>& g) {
  return *std::min_element(g.begin(), g.end());
}
double host_var(const std::vector<double>& g, double correction) {
  double m = host_mean(g), s = 0;
  for (double v : g) s += (v - m) * (v - m);
  return s / (g.size() - correction);
}
double host_logsumexp(const std::vector<double>& g) {
  double m = host_max(g);
  if (std::isinf(m)) return m;
  double s = 0;
  for (double v : g) s += std::exp(v - m);
  return m + std::log(s);
}

// The values of a permuted/sliced view in its logical row-major order.
std::vector<double> logical(const Tensor& t) {
  return t.to_vector<double>();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_reduce)

BOOST_AUTO_TEST_CASE(sum_mean_prod_max_min_over_each_single_dim_with_and_without_keepdim) {
  Shape shape = {2, 3, 4};
  auto v = host_random(24, -2, 2, 3);
  Tensor x = f64s(v, shape);
  struct R {
    const char* name;
    Tensor (*op)(const Tensor&, const Dims&, bool);
    HostReduce ref;
  } cases[] = {
      {"sum", [](const Tensor& t, const Dims& d, bool k) { return sum(t, d, k); }, host_sum},
      {"mean", [](const Tensor& t, const Dims& d, bool k) { return mean(t, d, k); }, host_mean},
      {"prod", [](const Tensor& t, const Dims& d, bool k) { return prod(t, d, k); }, host_prod},
      {"amax", [](const Tensor& t, const Dims& d, bool k) { return amax(t, d, k); }, host_max},
      {"amin", [](const Tensor& t, const Dims& d, bool k) { return amin(t, d, k); }, host_min},
  };
  for (const auto& c : cases)
    for (std::int64_t d = 0; d < 3; ++d)
      for (bool keep : {false, true}) {
        BOOST_TEST_CONTEXT(c.name << " dim " << d << " keepdim " << keep) {
          check_close(c.op(x, {d}, keep), reduced(shape, {d}, keep),
                      host_reduce(v, shape, {d}, c.ref), 1e-13, 1e-15);
          check_close(c.op(x, {d - 3}, keep), reduced(shape, {d}, keep),
                      host_reduce(v, shape, {d}, c.ref), 1e-13, 1e-15);
        }
      }
}

BOOST_AUTO_TEST_CASE(sum_over_two_dims_of_transposed_input) {
  auto v = as_f32(host_random(24, -1, 1, 4));
  Tensor base = f32s(std::vector<float>(v.begin(), v.end()), {2, 3, 4});
  Tensor x = base.permute({2, 0, 1});  // [4, 2, 3], not contiguous
  auto lv = logical(x);
  for (auto dims : std::vector<Dims>{{0, 2}, {1, 2}, {0, 1}, {-1, 0}}) {
    std::vector<std::int64_t> nd;
    for (auto d : dims) nd.push_back(d < 0 ? d + 3 : d);
    std::sort(nd.begin(), nd.end());
    for (bool keep : {false, true}) {
      BOOST_TEST_CONTEXT("dims " << nd[0] << "," << nd[1] << " keepdim " << keep) {
        check_close(sum(x, dims, keep), reduced({4, 2, 3}, nd, keep),
                    host_reduce(lv, {4, 2, 3}, nd, host_sum), 1e-6, 1e-6);
        check_close(x.max(dims, keep), reduced({4, 2, 3}, nd, keep),
                    host_reduce(lv, {4, 2, 3}, nd, host_max), 0, 0);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(reductions_over_all_dims_of_a_sliced_input) {
  std::vector<double> v(30);
  for (int i = 0; i < 30; ++i) v[i] = (i % 7) - 3 + 0.5 * (i % 2);
  Tensor x = f64s(v, {5, 6}).slice(0, 1, 5, 2).slice(1, -4, 6);  // rows 1, 3; cols 2..5
  auto lv = logical(x);
  BOOST_TEST(lv.size() == 8u);
  check_close(sum(x), {}, {host_sum(lv)}, 1e-14, 0);
  check_close(x.sum({}, true), {1, 1}, {host_sum(lv)}, 1e-14, 0);
  check_close(mean(x), {}, {host_mean(lv)}, 1e-14, 0);
  check_close(prod(x), {}, {host_prod(lv)}, 1e-14, 0);
  check_values(amax(x), {}, {host_max(lv)});
  check_values(x.min(), {}, {host_min(lv)});
  check_close(sum(x, {0, 1}), {}, {host_sum(lv)}, 1e-14, 0);
  check_close(x.mean({-2, -1}, true), {1, 1}, {host_mean(lv)}, 1e-14, 0);
}

BOOST_AUTO_TEST_CASE(reducing_a_zero_dim_tensor_is_the_identity) {
  Tensor s = scalar_tensor(3.5, DType::f64);
  check_values(sum(s), {}, {3.5});
  check_values(amax(s, {0}), {}, {3.5});
  check_values(s.sum({}, true), {}, {3.5});
  check_values(argmax(s, 0), {}, DType::i64, {0});
}

BOOST_AUTO_TEST_CASE(argmax_and_argmin_return_the_first_of_ties) {
  Tensor x = f32s({1, 3, 3, 0, 0, 2,   // row 0: max at 1 (tie with 2), min at 3 (tie with 4)
                   5, 5, 5, 5, 5, 5},  // row 1: all equal
                  {2, 6});
  check_values(argmax(x, 1), {2}, DType::i64, {1, 0});
  check_values(argmin(x, 1), {2}, DType::i64, {3, 0});
  check_values(argmax(x, -1, true), {2, 1}, DType::i64, {1, 0});
  check_values(argmax(x, 0), {6}, {1, 1, 1, 1, 1, 1});
  check_values(argmin(x, 0), {6}, {0, 0, 0, 0, 0, 0});
  check_values(x.argmax(0, true), {1, 6}, {1, 1, 1, 1, 1, 1});
  // On a transposed input the index counts along the logical dim.
  Tensor t = x.t();  // [6, 2]
  check_values(argmax(t, 0), {2}, {1, 0});
  check_values(argmin(t, 0), {2}, {3, 0});
  check_values(argmax(i64s({-5, 7, 7, -9}), 0), {}, {1});
  check_values(argmin(i64s({-5, 7, 7, -9}), 0), {}, {3});
  // NaN counts as the extreme, as in PyTorch.
  check_values(argmax(f32s({1, NAN, 5}), 0), {}, {1});
  check_values(argmin(f32s({1, NAN, -5}), 0), {}, {1});
}

BOOST_AUTO_TEST_CASE(amax_and_amin_propagate_nan) {
  Tensor x = f32s({1, NAN, 3, 4, 5, 6}, {2, 3});
  check_values(amax(x, {1}), {2}, {NAN, 6});
  check_values(amin(x, {1}), {2}, {NAN, 4});
  check_values(amax(x), {}, {NAN});
  check_values(sum(x, {1}), {2}, {NAN, 15});
}

BOOST_AUTO_TEST_CASE(var_and_std_with_correction_zero_and_one) {
  Shape shape = {3, 5};
  auto v = host_random(15, -3, 3, 9);
  Tensor x = f64s(v, shape);
  for (double corr : {0.0, 1.0}) {
    auto ref_var = [corr](const std::vector<double>& g) { return host_var(g, corr); };
    auto ref_std = [corr](const std::vector<double>& g) { return std::sqrt(host_var(g, corr)); };
    BOOST_TEST_CONTEXT("correction " << corr) {
      check_close(var(x, {1}, corr), {3}, host_reduce(v, shape, {1}, ref_var), 1e-13, 1e-15);
      check_close(var(x, {0}, corr, true), {1, 5}, host_reduce(v, shape, {0}, ref_var), 1e-13,
                  1e-15);
      check_close(kiln::std(x, {-1}, corr), {3}, host_reduce(v, shape, {1}, ref_std), 1e-13, 1e-15);
      check_close(kiln::std(x, {}, corr), {}, host_reduce(v, shape, {0, 1}, ref_std), 1e-13, 1e-15);
      check_close(var(x.t(), {0}, corr), {3}, host_reduce(v, shape, {1}, ref_var), 1e-13, 1e-15);
    }
  }
  // Hand values: [1, 2, 3, 4] has population variance 1.25 and sample variance 5/3.
  check_close(var(f32s({1, 2, 3, 4}), {}, 0), {}, {1.25}, 1e-7, 0);
  check_close(var(f32s({1, 2, 3, 4})), {}, {5.0 / 3}, 1e-6, 0);
  check_close(kiln::std(f32s({2, 4, 4, 4, 5, 5, 7, 9}), {}, 0), {}, {2}, 1e-7, 0);
}

BOOST_AUTO_TEST_CASE(logsumexp_matches_host_loops_and_does_not_overflow) {
  Shape shape = {2, 3, 4};
  auto v = host_random(24, -5, 5, 12);
  Tensor x = f64s(v, shape);
  for (auto dims : std::vector<std::vector<std::int64_t>>{{0}, {1}, {2}, {0, 2}, {0, 1, 2}})
    for (bool keep : {false, true})
      check_close(logsumexp(x, Dims(dims.begin(), dims.end()), keep), reduced(shape, dims, keep),
                  host_reduce(v, shape, dims, host_logsumexp), 1e-13, 1e-14);
  check_close(logsumexp(x, {-1}), {2, 3}, host_reduce(v, shape, {2}, host_logsumexp), 1e-13, 0);
  check_close(logsumexp(x, {}), {}, {host_logsumexp(v)}, 1e-13, 0);
  // exp(1000) overflows f32 and f64; the result must not.
  Tensor big = f32s({1000, 1000, 999, -1000});
  check_close(logsumexp(big, {0}), {}, {host_logsumexp({1000, 1000, 999, -1000})}, 1e-6, 0);
  check_close(logsumexp(f64s({1000, 1000}), {0}), {}, {1000 + std::log(2.0)}, 1e-15, 0);
  check_close(logsumexp(f64s({-1000, -1000}), {0}), {}, {-1000 + std::log(2.0)}, 1e-15, 0);
  // A row of -inf gives -inf (not NaN); one -inf among finite values is ignored.
  const double inf = std::numeric_limits<double>::infinity();
  Tensor rows = f64s({-inf, -inf, -inf, 0, -inf, 0, inf, 1, 2}, {3, 3});
  check_values(logsumexp(rows, {1}), {3}, {-inf, std::log(2.0), inf});
  check_close(logsumexp(rows.t(), {0}, true), {1, 3}, {-inf, std::log(2.0), inf}, 1e-15, 0);
}

BOOST_AUTO_TEST_CASE(integer_and_bool_sums_widen_to_i64) {
  Tensor i = i32s({2000000000, 2000000000, 1, -1}, {2, 2});
  check_values(sum(i), {}, DType::i64, {4000000000.0});
  check_values(sum(i, {0}), {2}, DType::i64, {2000000001.0, 1999999999.0});
  check_values(sum(i, {1}), {2}, DType::i64, {4000000000.0, 0});
  check_values(sum(bools({true, true, false, true}, {4})), {}, DType::i64, {3});
  check_values(prod(i32s({100000, 100000}, {2})), {}, DType::i64, {1e10});
  check_values(amax(i), {}, DType::i32, {2000000000});
  check_values(amin(i32s({3, -4}, {2})), {}, DType::i32, {-4});
  check_values(amax(bools({false, true}, {2})), {}, DType::bool_, {1});
  check_values(amin(bools({false, true}, {2})), {}, DType::bool_, {0});
}

BOOST_AUTO_TEST_CASE(half_sums_accumulate_in_f32_and_round_once) {
  // Adding 1 to 2048 in f16 is lost; an f32 accumulator reaches 4096 exactly.
  Tensor ones_h = ones({4096}, DType::f16);
  check_values(sum(ones_h), {}, DType::f16, {4096});
  auto v = round_to(DType::f16, host_random(1000, 0, 1, 21));
  Tensor h = typed(DType::f16, v, {10, 100});
  std::vector<double> want;
  for (int r = 0; r < 10; ++r) {
    float acc = 0;
    for (int c = 0; c < 100; ++c) acc += static_cast<float>(v[r * 100 + c]);
    want.push_back(round_to(DType::f16, acc));
  }
  check_close(sum(h, {1}), {10}, want, 0x1.0p-10, 0);
  auto vb = round_to(DType::bf16, v);
  std::vector<double> want_b;
  for (int r = 0; r < 10; ++r) {
    float acc = 0;
    for (int c = 0; c < 100; ++c) acc += static_cast<float>(vb[r * 100 + c]);
    want_b.push_back(round_to(DType::bf16, acc));
  }
  check_close(sum(typed(DType::bf16, vb, {10, 100}), {1}), {10}, want_b, 0x1.0p-7, 0);
  Tensor m = mean(h, {1});
  BOOST_TEST(m.dtype() == DType::f16);
  std::vector<double> want_mean;
  for (double w : want) want_mean.push_back(w / 100);
  check_close(m, {10}, want_mean, 2e-3, 0);
}

BOOST_AUTO_TEST_CASE(reductions_over_a_size_zero_dim) {
  Tensor e = zeros({3, 0});
  check_values(sum(e, {1}), {3}, {0, 0, 0});
  check_values(sum(e, {1}, true), {3, 1}, {0, 0, 0});
  check_values(prod(e, {1}), {3}, {1, 1, 1});
  check_values(sum(e, {0}), {0}, {});
  check_values(sum(e), {}, {0});
  check_values(sum(zeros({0}, DType::i32)), {}, DType::i64, {0});
  BOOST_CHECK_EXCEPTION(amax(e, {1}), IndexError, message_has({"amax", "size 0", "[3, 0]"}));
  BOOST_CHECK_EXCEPTION(amin(e), IndexError, message_has({"amin", "[3, 0]"}));
  BOOST_CHECK_EXCEPTION(argmax(e, 1), IndexError, message_has({"argmax", "[3, 0]"}));
  // Reducing the non-empty dim of an empty tensor is fine.
  check_values(amax(e, {0}), {0}, {});
}

BOOST_AUTO_TEST_CASE(long_f32_sums_stay_close_to_the_exact_sum) {
  auto v = as_f32(host_random(100000, 0, 1, 77));
  Tensor x = typed(DType::f32, v, {100000});
  double exact = host_sum(v);
  check_close(sum(x), {}, {exact}, 1e-5, 0);
  check_close(mean(x), {}, {exact / 100000}, 1e-5, 0);
  check_close(sum(x.reshape({100, 1000}), {1}).sum(), {}, {exact}, 1e-5, 0);
}

BOOST_AUTO_TEST_CASE(mean_of_f32_rows_matches_hand_values) {
  Tensor x = f32s({1, 2, 3, 4, 5, 6}, {2, 3});
  check_values(mean(x, {1}), {2}, {2, 5});
  check_values(mean(x, {0}), {3}, {2.5, 3.5, 4.5});
  check_values(x.mean(), {}, {3.5});
  check_values(x.prod({1}), {2}, {6, 120});
  check_values(x.sum({0}, true), {1, 3}, {5, 7, 9});
}

BOOST_AUTO_TEST_SUITE_END()
