// Ops that work along dims, against plain loops: max/min over a dim (values and indices, ties,
// NaN), cumsum (dims, reverse, integer accumulation and wrapping, half types), softmax and
// log_softmax (half types rounded once), bmm, einsum and negative pad (cropping). Their gradients
// are in test_gradcheck_along_dims.cpp.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "support/reference.h"

using namespace kiln;
using namespace kiln::test;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> iota(std::int64_t n) {
  std::vector<double> out;
  for (std::int64_t i = 0; i < n; ++i) out.push_back(static_cast<double>(i + 1));
  return out;
}

// Visits (outer, inner) pairs and the stride of `dim` in a row-major `shape`.
struct Lines {
  std::int64_t outer, size, inner;
};
Lines lines_of(const Shape& shape, std::int64_t dim) {
  Lines l{1, shape[dim], 1};
  for (std::int64_t d = 0; d < dim; ++d) l.outer *= shape[d];
  for (std::size_t d = dim + 1; d < shape.size(); ++d) l.inner *= shape[d];
  return l;
}

// max/min along `dim` as PyTorch defines it: the first NaN wins, else the first extreme.
void ref_extreme(const std::vector<double>& x, const Shape& shape, std::int64_t dim, bool want_max,
                 std::vector<double>& values, std::vector<double>& indices) {
  Lines l = lines_of(shape, dim);
  for (std::int64_t o = 0; o < l.outer; ++o)
    for (std::int64_t i = 0; i < l.inner; ++i) {
      std::int64_t best = 0;
      for (std::int64_t k = 0; k < l.size; ++k) {
        double v = x[(o * l.size + k) * l.inner + i], b = x[(o * l.size + best) * l.inner + i];
        if (std::isnan(b)) break;
        if (std::isnan(v) || (want_max ? v > b : v < b)) best = k;
      }
      values.push_back(x[(o * l.size + best) * l.inner + i]);
      indices.push_back(static_cast<double>(best));
    }
}

std::vector<double> ref_cumsum(const std::vector<double>& x, const Shape& shape, std::int64_t dim,
                               bool reverse) {
  Lines l = lines_of(shape, dim);
  std::vector<double> out(x.size());
  for (std::int64_t o = 0; o < l.outer; ++o)
    for (std::int64_t i = 0; i < l.inner; ++i) {
      double acc = 0;
      for (std::int64_t s = 0; s < l.size; ++s) {
        std::int64_t k = reverse ? l.size - 1 - s : s;
        std::int64_t at = (o * l.size + k) * l.inner + i;
        acc += x[at];
        out[at] = acc;
      }
    }
  return out;
}

std::vector<double> ref_softmax(const std::vector<double>& x, const Shape& shape, std::int64_t dim,
                                bool log_form) {
  Lines l = lines_of(shape, dim);
  std::vector<double> out(x.size());
  for (std::int64_t o = 0; o < l.outer; ++o)
    for (std::int64_t i = 0; i < l.inner; ++i) {
      auto at = [&](std::int64_t k) { return (o * l.size + k) * l.inner + i; };
      double m = -kInf, s = 0;
      for (std::int64_t k = 0; k < l.size; ++k) m = std::max(m, x[at(k)]);
      for (std::int64_t k = 0; k < l.size; ++k) s += std::exp(x[at(k)] - m);
      for (std::int64_t k = 0; k < l.size; ++k)
        out[at(k)] = log_form ? x[at(k)] - m - std::log(s) : std::exp(x[at(k)] - m) / s;
    }
  return out;
}

// Constant padding with (before, after) pairs from the last dim; negative amounts crop.
std::vector<double> ref_pad(const std::vector<double>& x, const Shape& shape, const Dims& pads,
                            double value, Shape& out_shape) {
  out_shape = shape;
  Dims before(shape.size(), 0);
  for (std::size_t p = 0; p < pads.size() / 2; ++p) {
    std::size_t d = shape.size() - 1 - p;
    before[d] = pads[2 * p];
    out_shape[d] += pads[2 * p] + pads[2 * p + 1];
  }
  std::vector<double> out;
  for (std::int64_t e = 0; e < numel(out_shape); ++e) {
    auto idx = unflatten(out_shape, e);
    bool inside = true;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      idx[d] -= before[d];
      inside = inside && idx[d] >= 0 && idx[d] < shape[d];
    }
    out.push_back(inside ? x[flat_index(shape, idx)] : value);
  }
  return out;
}

// einsum by definition, for letter-only equations with "->": every assignment of the labels,
// the product of the operands' entries added into the output's entry.
std::vector<double> ref_einsum(const std::string& equation,
                               const std::vector<std::vector<double>>& values,
                               const std::vector<Shape>& shapes, Shape& out_shape) {
  std::size_t arrow = equation.find("->");
  std::vector<std::string> terms;
  std::string lhs = equation.substr(0, arrow), out = equation.substr(arrow + 2), cur;
  for (char c : lhs + ",") {
    if (c == ',') {
      terms.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  std::string labels;
  std::vector<std::int64_t> sizes;
  for (std::size_t t = 0; t < terms.size(); ++t)
    for (std::size_t d = 0; d < terms[t].size(); ++d)
      if (labels.find(terms[t][d]) == std::string::npos) {
        labels += terms[t][d];
        sizes.push_back(shapes[t][d]);
      }
  out_shape.clear();
  for (char c : out) out_shape.push_back(sizes[labels.find(c)]);
  std::vector<double> result(static_cast<std::size_t>(numel(out_shape)), 0.0);
  Shape all(sizes.begin(), sizes.end());
  for (std::int64_t e = 0; e < numel(all); ++e) {
    auto at = unflatten(all, e);
    auto index_of = [&](const std::string& term) {
      std::vector<std::int64_t> idx;
      for (char c : term) idx.push_back(at[labels.find(c)]);
      return idx;
    };
    double prod = 1;
    for (std::size_t t = 0; t < terms.size(); ++t)
      prod *= values[t][flat_index(shapes[t], index_of(terms[t]))];
    result[flat_index(out_shape, index_of(out))] += prod;
  }
  return result;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_along_dims)

BOOST_AUTO_TEST_CASE(max_and_min_over_a_dim_take_the_first_tie_and_propagate_nan) {
  const std::vector<double> x = {1, 3, 3, 2, 5, 5, 0, -1, 2, kNaN, 9, kNaN};
  {
    auto [v, i] = kiln::max(f32s({1, 3, 3, 2, 5, 5, 0, -1, 2, NAN, 9, NAN}, {3, 4}), 1);
    check_values(v, {3}, DType::f32, {3, 5, kNaN});
    check_values(i, {3}, DType::i64, {1, 0, 1});
  }
  {
    auto [v, i] = kiln::min(typed(DType::f64, x, {3, 4}), -1, /*keepdim=*/true);
    check_values(v, {3, 1}, DType::f64, {1, -1, kNaN});
    check_values(i, {3, 1}, DType::i64, {0, 3, 1});
  }
  // Every dim of a 3-d tensor with repeated values, in every dtype, against the loop.
  auto base = host_random(24, -3, 3, 11);
  for (auto& b : base) b = std::round(b);  // many ties
  const Shape shape{2, 3, 4};
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    for (std::int64_t d = 0; d < 3; ++d) {
      for (bool want_max : {true, false}) {
        std::vector<double> rv, ri;
        ref_extreme(base, shape, d, want_max, rv, ri);
        Shape out = shape;
        out[d] = 1;
        BOOST_TEST_CONTEXT(dtype_name(t) << " dim " << d << (want_max ? " max" : " min")) {
          Tensor xt = typed(t, base, shape);
          auto [v, i] = want_max ? kiln::max(xt, d, true) : kiln::min(xt, d, true);
          check_values(v, out, t, rv);
          check_values(i, out, DType::i64, ri);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(max_and_min_of_views_bools_zero_and_scalars) {
  // Transposed: the dim is of the view.
  Tensor x = f64s({4, 1, 7, 2, 9, 3}, {2, 3}).transpose(0, 1);  // [[4,2],[1,9],[7,3]]
  auto [v, i] = kiln::max(x, 0);
  check_values(v, {2}, {7, 9});
  check_values(i, {2}, {2, 1});
  auto [bv, bi] = kiln::max(bools({false, true, true, false}, {2, 2}), 1);
  check_values(bv, {2}, DType::bool_, {1, 1});
  check_values(bi, {2}, {1, 0});
  // 0.0 and -0.0 compare equal: the first one is taken.
  auto [zv, zi] = kiln::min(f64s({0.0, -0.0}), 0);
  BOOST_TEST(zi.item() == 0);
  BOOST_TEST(!std::signbit(zv.item()));
  auto [kv, ki] = kiln::min(scalar_tensor(-1.5), -1, /*keepdim=*/true);
  check_values(kv, {}, {-1.5});
  check_values(ki, {}, DType::i64, {0});
  auto [sv, si] = kiln::max(scalar_tensor(2.5), 0);
  check_values(sv, {}, {2.5});
  check_values(si, {}, DType::i64, {0});
  auto [ev, ei] = kiln::max(zeros({0, 3}), 1);
  check_values(ev, {0}, {});
  check_values(ei, {0}, {});
  auto [iv, ii] = kiln::min(typed(DType::f32, {kInf, -kInf, kInf}, {3}), 0);
  check_values(iv, {}, {-kInf});
  check_values(ii, {}, {1});
}

BOOST_AUTO_TEST_CASE(cumsum_along_every_dim_and_in_reverse) {
  const Shape shape{2, 3, 4};
  auto x = as_f32(host_random(24, -5, 5, 21));
  for (std::int64_t d = -3; d < 3; ++d) {
    for (bool reverse : {false, true}) {
      auto want = ref_cumsum(x, shape, d < 0 ? d + 3 : d, reverse);
      BOOST_TEST_CONTEXT("dim " << d << (reverse ? " reverse" : "")) {
        check_close(cumsum(f64s(x, shape), d, reverse), shape, want, 1e-14, 1e-14);
        check_close(cumsum(typed(DType::f32, x, shape), d, reverse), shape, want, 1e-5, 1e-5);
      }
    }
  }
  // A transposed input: cumsum along dim 1 of the view.
  Tensor t = f64s({1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1);  // [[1,4],[2,5],[3,6]]
  check_values(cumsum(t, 1), {3, 2}, {1, 5, 2, 7, 3, 9});
  check_values(cumsum(t, 0, true), {3, 2}, {6, 15, 5, 11, 3, 6});
  check_values(cumsum(f64s({1, kNaN, 2, kInf}), 0), {4}, {1, kNaN, kNaN, kNaN});
  check_values(cumsum(zeros({0, 3}), 0), {0, 3}, {});
  check_values(cumsum(scalar_tensor(4.0), 0), {}, {4});
  check_values(cumsum(scalar_tensor(4.0), -1), {}, {4});
}

BOOST_AUTO_TEST_CASE(cumsum_of_integers_accumulates_in_i64_and_wraps) {
  // i32 and bool give i64 (as PyTorch): the sum of two large i32 values does not wrap.
  const auto hi32 = std::numeric_limits<std::int32_t>::max();
  Tensor c = cumsum(i32s({hi32, hi32, 2}, {3}), 0);
  BOOST_TEST(c.dtype() == DType::i64);
  auto cv = c.to_vector<std::int64_t>();
  BOOST_TEST(cv == (std::vector<std::int64_t>{hi32, 2LL * hi32, 2LL * hi32 + 2}),
             boost::test_tools::per_element());
  check_values(cumsum(bools({true, false, true, true}, {4}), 0), {4}, DType::i64, {1, 1, 2, 3});
  check_values(cumsum(i64s({3, -1, 4, -1, 5}), 0, true), {5}, DType::i64, {10, 7, 8, 4, 5});
  // i64 overflow wraps around (two's complement), as PyTorch's does.
  const auto hi64 = std::numeric_limits<std::int64_t>::max();
  const auto lo64 = std::numeric_limits<std::int64_t>::min();
  auto w = cumsum(i64s({hi64, 1, -1, lo64}), 0).to_vector<std::int64_t>();
  BOOST_TEST(w == (std::vector<std::int64_t>{hi64, lo64, hi64, -1}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(cumsum_of_half_types_accumulates_in_f32) {
  // In f16, 2048 + 1 rounds back to 2048 every step; accumulating in f32 reaches 2050.
  check_values(cumsum(typed(DType::f16, {2048, 1, 1}, {3}), 0), {3}, DType::f16,
               {2048, 2048, 2050});
  // bf16 has 8 significant bits: 256 + 1 + 1 is 258 only when accumulated wider.
  check_values(cumsum(typed(DType::bf16, {256, 1, 1}, {3}), 0), {3}, DType::bf16, {256, 256, 258});
}

BOOST_AUTO_TEST_CASE(softmax_and_log_softmax_match_the_formula) {
  const Shape shape{3, 5};
  auto x = as_f32(host_random(15, -8, 8, 31));
  for (std::int64_t d : {0, 1, -1}) {
    std::int64_t nd = d < 0 ? d + 2 : d;
    BOOST_TEST_CONTEXT("dim " << d) {
      check_close(softmax(f64s(x, shape), d), shape, ref_softmax(x, shape, nd, false), 1e-14,
                  1e-16);
      check_close(log_softmax(f64s(x, shape), d), shape, ref_softmax(x, shape, nd, true), 1e-14,
                  1e-14);
      check_close(softmax(typed(DType::f32, x, shape), d), shape, ref_softmax(x, shape, nd, false),
                  4e-6, 1e-9);
      check_close(log_softmax(typed(DType::f32, x, shape), d), shape,
                  ref_softmax(x, shape, nd, true), 4e-6, 4e-6);
    }
  }
  // A transposed input, and integers (computed as f32).
  Tensor xt = f64s(x, shape).transpose(0, 1);
  check_close(softmax(xt, 1).transpose(0, 1).contiguous(), shape, ref_softmax(x, shape, 0, false),
              1e-14, 1e-16);
  Tensor si = softmax(i64s({0, 1, 2}), 0);
  BOOST_TEST(si.dtype() == DType::f32);
  check_close(si, {3}, ref_softmax({0, 1, 2}, {3}, 0, false), 4e-6, 0);
}

BOOST_AUTO_TEST_CASE(softmax_of_half_types_is_computed_in_f32_and_rounded_once) {
  const Shape shape{4, 6};
  for (DType t : {DType::f16, DType::bf16}) {
    auto x = round_to(t, host_random(24, -4, 4, t == DType::f16 ? 41 : 42));
    auto sm = round_to(t, ref_softmax(x, shape, 1, false));
    auto lsm = round_to(t, ref_softmax(x, shape, 1, true));
    BOOST_TEST_CONTEXT(dtype_name(t)) {
      check_values(softmax(typed(t, x, shape), 1), shape, t, sm);
      check_values(log_softmax(typed(t, x, shape), 1), shape, t, lsm);
    }
  }
}

BOOST_AUTO_TEST_CASE(softmax_with_infinities_large_values_nan_and_degenerate_shapes) {
  // -inf entries (masked positions) get probability 0; a large shift does not overflow.
  check_values(softmax(f64s({-kInf, 0, -kInf, 0}), 0), {4}, {0, 0.5, 0, 0.5});
  check_close(log_softmax(f64s({-kInf, 0, 0}), 0), {3}, {-kInf, -std::log(2.0), -std::log(2.0)},
              1e-15, 0);
  check_values(softmax(f64s({1000, 1000}), 0), {2}, {0.5, 0.5});
  check_close(log_softmax(f64s({1000, 0}), 0), {2}, {0, -1000}, 1e-15, 0);
  // A row of -inf or with a NaN has no distribution: NaN, as in PyTorch.
  check_values(softmax(f64s({-kInf, -kInf, 1, 2}, {2, 2}), 1).slice(0, 0, 1), {1, 2}, {kNaN, kNaN});
  check_values(softmax(f64s({1, kNaN, 2}), 0), {3}, {kNaN, kNaN, kNaN});
  check_values(softmax(scalar_tensor(3.0, DType::f64), 0), {}, {1});
  check_values(log_softmax(scalar_tensor(3.0, DType::f64), -1), {}, {0});
  check_values(softmax(zeros({0, 3}), 1), {0, 3}, {});
  check_values(log_softmax(zeros({3, 0}), 1), {3, 0}, {});
}

BOOST_AUTO_TEST_CASE(bmm_matches_a_triple_loop) {
  const std::int64_t B = 3, n = 2, m = 4, p = 5;
  auto a = host_random(B * n * m, -2, 2, 51), b = host_random(B * m * p, -2, 2, 52);
  std::vector<double> want(B * n * p, 0.0);
  for (std::int64_t s = 0; s < B; ++s)
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < p; ++j)
        for (std::int64_t k = 0; k < m; ++k)
          want[(s * n + i) * p + j] += a[(s * n + i) * m + k] * b[(s * m + k) * p + j];
  check_close(bmm(f64s(a, {B, n, m}), f64s(b, {B, m, p})), {B, n, p}, want, 1e-13, 1e-13);
  // Transposed operands: b given as a [B, p, m] tensor viewed as [B, m, p].
  std::vector<double> bt(b.size());
  for (std::int64_t s = 0; s < B; ++s)
    for (std::int64_t k = 0; k < m; ++k)
      for (std::int64_t j = 0; j < p; ++j) bt[(s * p + j) * m + k] = b[(s * m + k) * p + j];
  check_close(bmm(f64s(a, {B, n, m}), f64s(bt, {B, p, m}).transpose(1, 2)), {B, n, p}, want, 1e-13,
              1e-13);
  check_close(bmm(typed(DType::f32, a, {B, n, m}), typed(DType::f32, b, {B, m, p})), {B, n, p},
              want, 1e-5, 1e-5);
  // Integers stay integers; empty batch and empty contraction.
  check_values(bmm(i64s({1, 2, 3, 4}, {1, 2, 2}), i64s({5, 6, 7, 8}, {1, 2, 2})), {1, 2, 2},
               DType::i64, {19, 22, 43, 50});
  check_values(bmm(zeros({0, 2, 3}), zeros({0, 3, 4})), {0, 2, 4}, {});
  check_values(bmm(zeros({2, 2, 0}), zeros({2, 0, 3})), {2, 2, 3}, std::vector<double>(12, 0.0));
}

BOOST_AUTO_TEST_CASE(einsum_equations_match_loops) {
  auto a = host_random(6, -1, 1, 61), b = host_random(12, -1, 1, 62), c = host_random(8, -1, 1, 63);
  Tensor A = f64s(a, {2, 3}), Bm = f64s(b, {3, 4}), C = f64s(c, {4, 2});
  std::vector<double> ab(8, 0.0), abc(4, 0.0);
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < 3; ++j) ab[i * 4 + k] += a[i * 3 + j] * b[j * 4 + k];
  for (int i = 0; i < 2; ++i)
    for (int l = 0; l < 2; ++l)
      for (int k = 0; k < 4; ++k) abc[i * 2 + l] += ab[i * 4 + k] * c[k * 2 + l];
  check_close(einsum("ij,jk->ik", {A, Bm}), {2, 4}, ab, 1e-14, 1e-14);
  check_close(einsum("ij,jk", {A, Bm}), {2, 4}, ab, 1e-14, 1e-14);            // implicit output
  check_close(einsum(" ij , jk -> ik ", {A, Bm}), {2, 4}, ab, 1e-14, 1e-14);  // spaces
  check_close(einsum("ij,jk,kl->il", {A, Bm, C}), {2, 2}, abc, 1e-14, 1e-14);
  // Transpose, row sums, total sum, outer product, dot product.
  check_values(einsum("ij->ji", {A}), {3, 2}, {a[0], a[3], a[1], a[4], a[2], a[5]});
  check_close(einsum("ij->i", {A}), {2}, {a[0] + a[1] + a[2], a[3] + a[4] + a[5]}, 1e-15, 1e-15);
  double total = 0, dot = 0;
  for (double v : a) total += v;
  for (int i = 0; i < 6; ++i) dot += a[i] * c[i];
  check_close(einsum("ij->", {A}), {}, {total}, 1e-14, 1e-14);
  check_close(einsum("i,i->", {f64s(a), f64s(std::vector<double>(c.begin(), c.begin() + 6))}), {},
              {dot}, 1e-14, 1e-14);
  std::vector<double> outer;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) outer.push_back(c[i] * a[j]);
  check_values(einsum("i,j->ij", {f64s({c[0], c[1]}), f64s({a[0], a[1], a[2]})}), {2, 3}, outer);
  // A size-1 index broadcasts against the other operand's size.
  check_values(einsum("ij,ij->ij", {f64s({2, 3}, {2, 1}), f64s({1, 2, 3, 4, 5, 6}, {2, 3})}),
               {2, 3}, {2, 4, 6, 12, 15, 18});
}

BOOST_AUTO_TEST_CASE(einsum_batched_attention_and_ellipsis) {
  const std::int64_t B = 2, H = 2, Q = 3, K = 4, D = 3;
  auto q = host_random(B * H * Q * D, -1, 1, 71), k = host_random(B * H * K * D, -1, 1, 72);
  std::vector<double> want(B * H * Q * K, 0.0);
  for (std::int64_t bh = 0; bh < B * H; ++bh)
    for (std::int64_t i = 0; i < Q; ++i)
      for (std::int64_t j = 0; j < K; ++j)
        for (std::int64_t d = 0; d < D; ++d)
          want[(bh * Q + i) * K + j] += q[(bh * Q + i) * D + d] * k[(bh * K + j) * D + d];
  check_close(einsum("bhqd,bhkd->bhqk", {f64s(q, {B, H, Q, D}), f64s(k, {B, H, K, D})}),
              {B, H, Q, K}, want, 1e-14, 1e-14);
  // Batch matmul written with bij,bjk, and with an ellipsis over the batch dims.
  check_close(einsum("bij,bkj->bik", {f64s(q, {B * H, Q, D}), f64s(k, {B * H, K, D})}),
              {B * H, Q, K}, want, 1e-14, 1e-14);
  check_close(einsum("...ij,...kj->...ik", {f64s(q, {B, H, Q, D}), f64s(k, {B, H, K, D})}),
              {B, H, Q, K}, want, 1e-14, 1e-14);
  // ...ij->...ji transposes the last two dims of any rank; a transposed view as input.
  Tensor x = f64s(iota(12), {2, 2, 3});
  std::vector<double> xt;
  for (int s = 0; s < 2; ++s)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) xt.push_back(iota(12)[s * 6 + i * 3 + j]);
  check_values(einsum("...ij->...ji", {x}), {2, 3, 2}, xt);
  check_values(einsum("...ij->...ji", {f64s(iota(6), {2, 3})}), {3, 2}, {1, 4, 2, 5, 3, 6});
  check_values(einsum("ij->ij", {f64s(iota(6), {2, 3}).transpose(0, 1)}), {3, 2},
               {1, 4, 2, 5, 3, 6});
}

BOOST_AUTO_TEST_CASE(einsum_implicit_order_scalars_empty_and_broadcast_batches) {
  // Implicit output: the indices in alphabetical order, so "ji" transposes.
  check_values(einsum("ji", {f64s(iota(6), {2, 3})}), {3, 2}, {1, 4, 2, 5, 3, 6});
  check_values(einsum("i,i->i", {f64s({1, 2, 3}), f64s({4, 5, 6})}), {3}, {4, 10, 18});
  check_values(einsum(",->", {scalar_tensor(2.0, DType::f64), scalar_tensor(3.0, DType::f64)}), {},
               {6});
  check_values(einsum("i,->i", {f64s({1, 2}), scalar_tensor(3.0, DType::f64)}), {2}, {3, 6});
  check_values(einsum("i->", {zeros({0}, DType::f64)}), {}, {0});
  check_values(einsum("ij,jk->ik", {zeros({2, 0}), zeros({0, 3})}), {2, 3},
               std::vector<double>(6, 0.0));
  // A batch of 1 broadcasts against a batch of 2.
  auto a = iota(4), b = iota(8);
  std::vector<double> want;
  for (int s = 0; s < 2; ++s)
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 2; ++k) {
        double acc = 0;
        for (int j = 0; j < 2; ++j) acc += a[i * 2 + j] * b[s * 4 + j * 2 + k];
        want.push_back(acc);
      }
  check_values(einsum("bij,bjk->bik", {f64s(a, {1, 2, 2}), f64s(b, {2, 2, 2})}), {2, 2, 2}, want);
  // An index summed out of one operand only, and one shared by three operands.
  check_values(einsum("ij,j->", {f64s({1, 2, 3, 4}, {2, 2}), f64s({10, 100})}), {}, {640});
  check_values(einsum("i,i,i->", {f64s({1, 2}), f64s({3, 4}), f64s({5, 6})}), {}, {63});
  check_values(einsum("i,i,i->i", {f64s({1, 2}), f64s({3, 4}), f64s({5, 6})}), {2}, {15, 48});
  // Integers contract exactly.
  check_values(einsum("ij,jk->ik", {i64s({1, 2, 3, 4}, {2, 2}), i64s({5, 6, 7, 8}, {2, 2})}),
               {2, 2}, DType::i64, {19, 22, 43, 50});
}

BOOST_AUTO_TEST_CASE(einsum_matches_its_definition_on_many_equations) {
  struct Case {
    std::string equation;
    std::vector<Shape> shapes;
  };
  const Case cases[] = {
      {"ijk,ikl->ijl", {{2, 3, 4}, {2, 4, 2}}},
      {"abc,cd->abd", {{2, 2, 3}, {3, 4}}},
      {"ab,cb->ac", {{2, 3}, {4, 3}}},
      {"abc->cab", {{2, 3, 4}}},
      {"abc->b", {{2, 3, 4}}},
      {"ab,ab,ab->a", {{3, 2}, {3, 2}, {3, 2}}},
      {"ij,kl->ijkl", {{2, 2}, {3, 2}}},
      {"ijk,jk->i", {{2, 3, 4}, {3, 4}}},
      {"ik,jk,kl->ijl", {{2, 3}, {4, 3}, {3, 2}}},
      {"bqd,bkd,bkv->bqv", {{2, 3, 4}, {2, 5, 4}, {2, 5, 2}}},
      {"ab,bc,cd,de->ae", {{2, 3}, {3, 2}, {2, 4}, {4, 2}}},
      {"abcd->dbca", {{2, 1, 3, 2}}},
      {"ab,b->", {{3, 4}, {4}}},
      {"ijk,kji->", {{2, 3, 4}, {4, 3, 2}}},
  };
  std::uint64_t seed = 100;
  for (const auto& c : cases) {
    std::vector<std::vector<double>> values;
    std::vector<Tensor> operands;
    for (const auto& shape : c.shapes) {
      values.push_back(host_random(static_cast<std::size_t>(numel(shape)), -1, 1, seed++));
      operands.push_back(f64s(values.back(), shape));
    }
    Shape out;
    auto want = ref_einsum(c.equation, values, c.shapes, out);
    BOOST_TEST_CONTEXT(c.equation) {
      check_close(einsum(c.equation, operands), out, want, 1e-13, 1e-13);
    }
  }
}

BOOST_AUTO_TEST_CASE(pad_with_negative_amounts_crops) {
  auto x = iota(5);
  Shape out;
  for (Dims pads :
       {Dims{-1, -2}, Dims{2, -3}, Dims{-4, 1}, Dims{-2, -3}, Dims{0, 0}, Dims{-5, 0}}) {
    auto want = ref_pad(x, {5}, pads, 9, out);
    BOOST_TEST_CONTEXT("pads [" << pads[0] << ", " << pads[1] << "]") {
      check_values(pad(f64s(x), pads, 9), out, DType::f64, want);
    }
  }
  auto y = iota(12);
  for (Dims pads : {Dims{-1, 1, 1, -2}, Dims{1, -2}, Dims{-2, -2, 0, 0}, Dims{0, 0, -1, 0}}) {
    auto want = ref_pad(y, {3, 4}, pads, -1, out);
    BOOST_TEST_CONTEXT("pads of [3, 4] " << pads.size()) {
      check_values(pad(f64s(y, {3, 4}), pads, -1), out, want);
      check_values(pad(typed(DType::i32, y, {3, 4}), pads, -1), out, DType::i32, want);
    }
  }
  // A transposed input: pads apply to the view's dims.
  std::vector<double> yt;
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 3; ++i) yt.push_back(y[i * 4 + j]);
  auto want = ref_pad(yt, {4, 3}, {-1, 0, 1, -2}, 0, out);
  check_values(pad(f64s(y, {3, 4}).transpose(0, 1), {-1, 0, 1, -2}), out, want);
}

BOOST_AUTO_TEST_SUITE_END()
