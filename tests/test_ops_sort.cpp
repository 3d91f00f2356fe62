// sort, argsort and topk: hand-computed orders (ties in index order, NaN largest, -0 equal to +0),
// an independent check of every result (ordered, a permutation, the values where the indices
// point), the CUDA kernels (the virtual GPU here) against the CPU over rows that take one chunk,
// several chunks and several merge passes, gradients by finite differences, compiled functions,
// and the errors.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "autograd/ops.h"
#include "jit/codegen/launch_stats.h"
#include "jit/compile.h"
#include "support/gradcheck_support.h"
#include "support/reference.h"

using namespace kiln;

namespace {

std::vector<double> doubles(const Tensor& t) {
  return t.to(Device::cpu()).to(DType::f64).to_vector<double>();
}
std::vector<std::int64_t> longs(const Tensor& t) {
  return t.to(Device::cpu()).to_vector<std::int64_t>();
}

// a strictly before b in the order sort(descending) leaves them in, NaN the largest.
bool ordered_before(double a, double b, bool descending) {
  if (descending) std::swap(a, b);
  if (std::isnan(a)) return false;
  return std::isnan(b) || a < b;
}

// Checks, without kiln's sort, that (values, indices) is a stable sort (or topk) of `x`'s rows
// along its last dim: each row's indices are distinct and in range, the values are x at them,
// they are ordered, equal values come in index order, and none left out comes before the last
// kept.
void check_sorted_rows(const Tensor& x, const Tensor& values, const Tensor& indices,
                       bool descending) {
  auto xs = doubles(x), vs = doubles(values);
  auto is = longs(indices);
  std::int64_t n = x.shape().back(), keep = values.shape().back();
  std::int64_t rows = n == 0 ? 0 : x.numel() / n;
  BOOST_TEST_REQUIRE(vs.size() == static_cast<std::size_t>(rows * keep));
  int bad = 0;
  for (std::int64_t r = 0; r < rows && bad < 5; ++r) {
    std::vector<bool> used(n, false);
    for (std::int64_t j = 0; j < keep; ++j) {
      std::int64_t i = is[r * keep + j];
      bool in_range = i >= 0 && i < n && !used[i];
      if (!in_range) {
        BOOST_TEST(in_range, "row " << r << " entry " << j << " index " << i);
        ++bad;
        continue;
      }
      used[i] = true;
      double v = vs[r * keep + j], want = xs[r * n + i];
      bool same = v == want || (std::isnan(v) && std::isnan(want));
      if (!same) ++bad;
      BOOST_TEST(same, "row " << r << " entry " << j << ": " << v << " but x = " << want);
      if (j > 0) {
        double prev = vs[r * keep + j - 1];
        bool order = !ordered_before(v, prev, descending) &&
                     (ordered_before(prev, v, descending) || is[r * keep + j - 1] < i);
        if (!order) ++bad;
        BOOST_TEST(order, "row " << r << " entries " << j - 1 << ", " << j << " out of order");
      }
    }
    if (keep == 0 || keep == n) continue;
    double last = vs[r * keep + keep - 1];
    std::int64_t last_index = is[r * keep + keep - 1];
    for (std::int64_t i = 0; i < n; ++i) {
      if (used[i]) continue;
      bool after = ordered_before(last, xs[r * n + i], descending) ||
                   (!ordered_before(xs[r * n + i], last, descending) && i > last_index);
      if (!after) ++bad;
      BOOST_TEST(after, "row " << r << ": x[" << i << "] = " << xs[r * n + i]
                               << " left out but comes before the last kept " << last);
    }
  }
}

// Random values with many ties: integers in [0, distinct) as `dtype`.
Tensor with_ties(const Shape& shape, std::int64_t distinct, DType dtype, std::uint64_t seed) {
  Generator gen(seed);
  return randint(0, distinct, shape, DType::i64, &gen).to(dtype);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_sort)

BOOST_AUTO_TEST_CASE(sort_orders_ties_by_index_and_nan_last_as_hand_computed) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = from_vector<double>({3, nan, -1, 3, -0.0, 0.0, -7, nan}, {8});
  auto [v, i] = sort(x);
  BOOST_TEST(longs(i) == (std::vector<std::int64_t>{6, 2, 4, 5, 0, 3, 1, 7}),
             boost::test_tools::per_element());
  auto [dv, di] = sort(x, 0, true);
  BOOST_TEST(longs(di) == (std::vector<std::int64_t>{1, 7, 0, 3, 4, 5, 2, 6}),
             boost::test_tools::per_element());
  BOOST_TEST(std::signbit(doubles(v)[2]));  // the values are x's own: -0 stays -0
  BOOST_TEST(longs(argsort(x, -1, true)) == longs(di), boost::test_tools::per_element());
  auto [tv, ti] = topk(x, 3);
  BOOST_TEST(longs(ti) == (std::vector<std::int64_t>{1, 7, 0}), boost::test_tools::per_element());
  auto [sv, si] = topk(x, 2, 0, false);
  BOOST_TEST(doubles(sv) == (std::vector<double>{-7, -1}), boost::test_tools::per_element());
  BOOST_TEST(longs(si) == (std::vector<std::int64_t>{6, 2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(sort_along_an_inner_dim_and_of_a_0_dim_tensor) {
  Tensor x = from_vector<float>({5, 1, 4, 2, 0, 9}, {3, 2});  // columns [5 4 0], [1 2 9]
  auto [v, i] = sort(x, 0, true);
  BOOST_TEST(v.shape() == (Shape{3, 2}));
  BOOST_TEST(doubles(v) == (std::vector<double>{5, 9, 4, 2, 0, 1}),
             boost::test_tools::per_element());
  BOOST_TEST(longs(i) == (std::vector<std::int64_t>{0, 2, 1, 1, 2, 0}),
             boost::test_tools::per_element());
  auto [kv, ki] = topk(x, 1, 0);
  BOOST_TEST(kv.shape() == (Shape{1, 2}));
  BOOST_TEST(longs(ki) == (std::vector<std::int64_t>{0, 2}), boost::test_tools::per_element());
  auto [sv, si] = sort(from_vector<float>({2.5f}, {}));
  BOOST_TEST(sv.dim() == 0);
  BOOST_TEST(sv.item() == 2.5);
  BOOST_TEST(longs(si) == (std::vector<std::int64_t>{0}));
}

BOOST_AUTO_TEST_CASE(cpu_results_pass_the_independent_check_at_every_dtype) {
  for (DType t :
       {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::bool_}) {
    BOOST_TEST_CONTEXT(dtype_name(t)) {
      Tensor x = with_ties({4, 37}, t == DType::bool_ ? 2 : 9, t, 3);
      for (bool descending : {false, true}) {
        auto [v, i] = sort(x, -1, descending);
        BOOST_TEST((v.dtype() == t));
        BOOST_TEST((i.dtype() == DType::i64));
        check_sorted_rows(x, v, i, descending);
        auto [kv, ki] = topk(x, 5, -1, descending);
        check_sorted_rows(x, kv, ki, descending);
      }
    }
  }
}

// The kernels sort chunks of up to 2048 entries and merge: rows of one chunk, of several (with a
// partial last one, an odd number of runs) and of several merge passes.
BOOST_AUTO_TEST_CASE(cuda_sort_and_topk_equal_the_cpu_from_one_chunk_to_many) {
  struct Case {
    Shape shape;
    std::int64_t dim, k;
  };
  const Case cases[] = {{{5, 1}, -1, 1},       {{3, 7}, -1, 3},     {{2, 2048}, -1, 50},
                        {{2, 2049}, -1, 2049}, {{1, 7000}, -1, 40}, {{9000}, 0, 9000},
                        {{300, 3}, 0, 20},     {{4, 1, 6}, 2, 6}};
  int runs = 0;
  for (const Case& c : cases) {
    for (DType t : {DType::f32, DType::bf16, DType::i64}) {
      for (bool descending : {false, true}) {
        BOOST_TEST_CONTEXT(shape_str(c.shape) << " dim " << c.dim << " k " << c.k << " "
                                              << dtype_name(t) << (descending ? " desc" : "")) {
          Generator gen(runs + 1);
          Tensor x = t == DType::i64 ? with_ties(c.shape, 50, t, runs + 1)
                                     : (randn(c.shape, DType::f32, &gen) * 8).to(t);
          Tensor xd = x.to(Device::cuda());
          auto want = sort(x, c.dim, descending);
          auto got = sort(xd, c.dim, descending);
          BOOST_TEST(got.values.device().is_cuda());
          BOOST_TEST(doubles(got.values) == doubles(want.values), boost::test_tools::per_element());
          BOOST_TEST(longs(got.indices) == longs(want.indices), boost::test_tools::per_element());
          auto want_k = topk(x, c.k, c.dim, descending);
          auto got_k = topk(xd, c.k, c.dim, descending);
          BOOST_TEST(got_k.values.shape() == want_k.values.shape());
          BOOST_TEST(longs(got_k.indices) == longs(want_k.indices),
                     boost::test_tools::per_element());
          ++runs;
        }
      }
    }
  }
  BOOST_TEST(runs == 48);
}

BOOST_AUTO_TEST_CASE(cuda_sort_puts_nan_last_and_keeps_minus_zero) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = from_vector<float>({0.0f, nan, -0.0f, -2.0f, nan, 1.0f}, {6});
  for (bool descending : {false, true}) {
    auto want = sort(x, 0, descending);
    auto got = sort(x.to(Device::cuda()), 0, descending);
    BOOST_TEST(longs(got.indices) == longs(want.indices), boost::test_tools::per_element());
    auto gv = doubles(got.values), wv = doubles(want.values);
    for (std::size_t i = 0; i < gv.size(); ++i)
      BOOST_TEST((std::isnan(wv[i]) ? std::isnan(gv[i])
                                    : gv[i] == wv[i] && std::signbit(gv[i]) == std::signbit(wv[i])),
                 "entry " << i);
  }
}

// A row of up to 2048 entries is one launch; every doubling past it adds one merge.
BOOST_AUTO_TEST_CASE(cuda_sort_launches_one_kernel_per_stage) {
  auto& stats = jit::codegen::launch_stats();
  for (auto [n, launches] : {std::pair{2048, 1}, {2049, 2}, {8192, 3}, {50257, 6}}) {
    Tensor x = rand({2, n}, DType::f32).to(Device::cuda());
    std::int64_t before = stats.launches;
    auto [v, i] = topk(x, 50);
    BOOST_TEST(stats.launches - before == launches, "n = " << n);
    check_sorted_rows(x, v, i, true);
  }
}

BOOST_AUTO_TEST_CASE(gradients_flow_to_the_elements_the_values_came_from) {
  using namespace kiln::test;
  Tensor x = uniform({3, 5}, -1, 1, 7);  // distinct values almost surely
  check("sort values", [](const Inputs& in) { return sort(in[0]).values; }, {x});
  check("sort dim 0 descending", [](const Inputs& in) { return sort(in[0], 0, true).values; }, {x});
  check("topk 2", [](const Inputs& in) { return topk(in[0], 2).values; }, {x});
  check("topk 2 smallest of dim 0",
        [](const Inputs& in) { return topk(in[0], 2, 0, false).values; }, {x});
  // By hand: the gradient lands where each kept value came from, zero elsewhere.
  Tensor y = from_vector<double>({0.5, 3, -1, 2}, {4}).requires_grad_(true);
  auto [v, i] = topk(y, 2);
  (v * from_vector<double>({10, 1}, {2})).sum().backward();
  BOOST_TEST(y.grad().to_vector<double>() == (std::vector<double>{0, 10, 0, 1}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(compiled_topk_and_sort_equal_eager_on_both_devices) {
  auto fn = [](const Tensor& logits) {
    auto [v, i] = topk(logits * 2.0, 4);
    auto [sv, si] = sort(softmax(v, -1), -1, true);
    return std::vector<Tensor>{sv, gather(i, -1, si)};
  };
  for (Device device : {Device::cpu(), Device::cuda()}) {
    BOOST_TEST_CONTEXT(device.str()) {
      auto f = jit::compile(fn);
      for (std::int64_t vocab : {10, 3000}) {
        Tensor x = randn({2, vocab}, DType::f32).to(device);
        auto got = f(x);
        auto want = fn(x);
        BOOST_TEST(got[0].device().str() == device.str());
        BOOST_TEST(doubles(got[0]) == doubles(want[0]), boost::test_tools::per_element());
        BOOST_TEST(longs(got[1]) == longs(want[1]), boost::test_tools::per_element());
      }
    }
  }
}

// The AOT backward of a compiled topk scatters the gradient through the saved indices, as the
// eager rule does (in f64 on the CPU).
BOOST_AUTO_TEST_CASE(a_compiled_topk_trains_as_eager) {
  auto fn = [](const Tensor& x, const Tensor& w) {
    auto [v, i] = topk(matmul(x, w), 3);
    return sum(sort(v * v, 0).values * 0.5);
  };
  auto f = jit::compile(fn);
  Tensor x0 = randn({4, 6}), w0 = randn({6, 40});
  auto leaf_of = [](const Tensor& t, DType d, Device dev) {
    return t.to(d).to(dev).requires_grad_(true);
  };
  Tensor x = leaf_of(x0, DType::f64, Device::cpu()), w = leaf_of(w0, DType::f64, Device::cpu());
  fn(x, w).backward();
  Tensor xd = leaf_of(x0, DType::f32, Device::cuda()), wd = leaf_of(w0, DType::f32, Device::cuda());
  f(xd, wd).backward();
  auto close = [](const Tensor& got, const Tensor& want) {
    auto g = doubles(got), e = doubles(want);
    double worst = 0, scale = 1e-12;
    for (std::size_t i = 0; i < e.size(); ++i) {
      worst = std::max(worst, std::abs(g[i] - e[i]));
      scale = std::max(scale, std::abs(e[i]));
    }
    return worst / scale;
  };
  BOOST_TEST(close(xd.grad(), x.grad()) < 1e-4);
  BOOST_TEST(close(wd.grad(), w.grad()) < 1e-4);
  BOOST_TEST(doubles(wd.grad()) != std::vector<double>(240, 0.0));  // the gradient reached w
}

BOOST_AUTO_TEST_CASE(bad_k_and_dims_are_errors_naming_the_op) {
  Tensor x = zeros({2, 3});
  KILN_CHECK_THROWS(topk(x, 4), IndexError,
                    "topk: k = 4 is out of range for dim 1 of size 3 (shape [2, 3])");
  KILN_CHECK_THROWS(topk(x, -1), IndexError, "topk: k = -1");
  KILN_CHECK_THROWS(topk(zeros({}), 0), IndexError, "topk: k = 0", "shape []");
  KILN_CHECK_THROWS(sort(x, 2), Error, "sort", "2");
}

BOOST_AUTO_TEST_SUITE_END()
