// Indexing and joining ops against host loops (gather, index_select, embedding, scatter_add,
// index_add, cat, stack, pad), and matmul/linear against Eigen matrix products: 2-D, batched,
// broadcast batch dims, the 1-D cases, integer and half operands, transposed inputs.
#include <boost/test/unit_test.hpp>

#include <Eigen/Dense>

#include "support/reference.h"

using namespace kiln;
using namespace kiln::test;

namespace {

using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

RowMat as_matrix(const std::vector<double>& v, std::int64_t offset, std::int64_t rows,
                 std::int64_t cols) {
  return Eigen::Map<const RowMat>(v.data() + offset, rows, cols);
}
std::vector<double> as_vector(const RowMat& m) {
  return std::vector<double>(m.data(), m.data() + m.size());
}

std::vector<double> iota(std::int64_t n, double scale = 1, double shift = 0) {
  std::vector<double> v(n);
  for (std::int64_t i = 0; i < n; ++i) v[i] = shift + scale * static_cast<double>(i);
  return v;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_index)

// ---- gather, index_select, embedding ----

BOOST_AUTO_TEST_CASE(gather_picks_along_a_dim) {
  Tensor x = f32s({0, 1, 2, 10, 11, 12, 20, 21, 22}, {3, 3});
  Tensor idx = i64s({2, 0, 1, 1}, {2, 2});
  // dim 1: out[i][j] = x[i][idx[i][j]]
  check_values(gather(x, 1, idx), {2, 2}, DType::f32, {2, 0, 11, 11});
  // dim 0: out[i][j] = x[idx[i][j]][j]
  check_values(gather(x, 0, idx), {2, 2}, {20, 1, 10, 11});
  check_values(gather(x, -1, i32s({0, 0, 2}, {3, 1})), {3, 1}, {0, 10, 22});
  // Non-contiguous input and a 3-D case against a loop.
  Tensor xt = x.t();  // xt[i][j] = x[j][i]
  check_values(gather(xt, 1, idx), {2, 2}, {20, 0, 11, 11});
  auto v = iota(24);
  Tensor x3 = f64s(v, {2, 3, 4});
  std::vector<std::int64_t> iv = {3, 0, 1, 2, 2, 2, 0, 1, 3, 3, 1, 0};
  Tensor i3 = i64s(iv, {2, 2, 3});
  std::vector<double> want;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 3; ++c) want.push_back(v[a * 12 + b * 4 + iv[a * 6 + b * 3 + c]]);
  check_values(gather(x3, 2, i3), {2, 2, 3}, want);
}

BOOST_AUTO_TEST_CASE(index_select_picks_whole_slices_with_repeats) {
  Tensor x = f32s({0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23}, {3, 4});
  check_values(index_select(x, 0, i64s({2, 0, 2})), {3, 4},
               {20, 21, 22, 23, 0, 1, 2, 3, 20, 21, 22, 23});
  check_values(index_select(x, 1, i32s({3, 1}, {2})), {3, 2}, {3, 1, 13, 11, 23, 21});
  check_values(index_select(x, -1, i64s({0})), {3, 1}, {0, 10, 20});
  check_values(index_select(x.t(), 0, i64s({1})), {1, 3}, {1, 11, 21});
  check_values(index_select(x, 0, i64s({}, {0})), {0, 4}, {});
  check_values(index_select(i64s({5, 6, 7}), 0, i64s({2, 2})), {2}, DType::i64, {7, 7});
}

BOOST_AUTO_TEST_CASE(embedding_looks_up_rows_for_indices_of_any_shape) {
  Tensor w = f32s({0, 0.5f, 1, 1.5f, 2, 2.5f, 3, 3.5f}, {4, 2});
  Tensor idx = i64s({3, 0, 1, 1, 2, 3}, {2, 3});
  Tensor e = embedding(w, idx);
  std::vector<double> want;
  for (std::int64_t i : {3, 0, 1, 1, 2, 3}) {
    want.push_back(0.5 * (2 * i));
    want.push_back(0.5 * (2 * i + 1));
  }
  check_values(e, {2, 3, 2}, DType::f32, want);
  check_values(embedding(w, i32s({2}, {1})), {1, 2}, {2, 2.5});
  check_values(embedding(w, i64s({1}, {})), {2}, {1, 1.5});
}

// ---- scatter_add and index_add ----

BOOST_AUTO_TEST_CASE(scatter_add_accumulates_repeated_indices) {
  Tensor self = f32s({1, 1, 1, 1}, {1, 4});
  Tensor idx = i64s({0, 2, 0, 0}, {1, 4});
  Tensor src = f32s({1, 2, 3, 4}, {1, 4});
  Tensor out = scatter_add(self, 1, idx, src);
  check_values(out, {1, 4}, DType::f32, {9, 1, 3, 1});
  check_values(self, {1, 4}, {1, 1, 1, 1});  // out of place
  // dim 0 on a 2-D tensor, index smaller than src: src[i][j] goes to out[idx[i][j]][j].
  Tensor z = zeros({3, 2}, DType::f64);
  Tensor i2 = i64s({2, 0, 2, 2}, {2, 2});
  Tensor s2 = f64s({1, 2, 9, 10, 4, 8}, {3, 2});  // only the first 2 rows are used
  check_values(scatter_add(z, 0, i2, s2), {3, 2}, {0, 2, 0, 0, 10, 10});
  check_values(scatter_add(zeros({3}, DType::i64), 0, i64s({1, 1, 1}), i64s({5, 6, 7})), {3},
               DType::i64, {0, 18, 0});
  // Non-contiguous self.
  Tensor st = f32s({1, 2, 3, 4}, {2, 2}).t();  // [[1, 3], [2, 4]]
  check_values(scatter_add(st, 1, i64s({1, 1, 0, 0}, {2, 2}), f32s({1, 1, 1, 1}, {2, 2})), {2, 2},
               {1, 5, 4, 4});
}

BOOST_AUTO_TEST_CASE(index_add_adds_whole_slices_with_repeats) {
  Tensor self = zeros({3, 2});
  Tensor src = f32s({1, 2, 3, 4, 5, 6}, {3, 2});
  check_values(index_add(self, 0, i64s({2, 0, 2}), src), {3, 2}, {3, 4, 0, 0, 6, 8});
  check_values(index_add(ones({2, 3}), 1, i32s({0, 0}, {2}), f32s({1, 2, 3, 4}, {2, 2})), {2, 3},
               {4, 1, 1, 8, 1, 1});
  check_values(index_add(typed(DType::f16, {0, 0}, {2}), 0, i64s({1, 1, 1}),
                         typed(DType::f16, {0.1, 0.1, 0.1}, {3})),
               {2}, DType::f16, {0, round_to(DType::f16, 3 * static_cast<float>(f16(0.1f)))});
}

// ---- cat, stack, pad ----

BOOST_AUTO_TEST_CASE(cat_joins_along_any_dim) {
  Tensor a = f32s({1, 2, 3, 4}, {2, 2}), b = f32s({5, 6}, {1, 2});
  check_values(cat({a, b}), {3, 2}, {1, 2, 3, 4, 5, 6});
  check_values(cat({a, b.t(), a}, 1), {2, 5}, {1, 2, 5, 1, 2, 3, 4, 6, 3, 4});
  check_values(cat({a, a}, -1), {2, 4}, {1, 2, 1, 2, 3, 4, 3, 4});
  check_values(cat({a}), {2, 2}, {1, 2, 3, 4});
  check_values(cat({zeros({0, 2}), b}), {1, 2}, {5, 6});
}

BOOST_AUTO_TEST_CASE(cat_promotes_mixed_dtypes_and_reads_non_contiguous_inputs) {
  Tensor i = i64s({1, 2}, {1, 2});
  Tensor f = f32s({0.5f, 1.5f}, {1, 2});
  Tensor d = f64s({0.25, 0.75}, {1, 2});
  check_values(cat({i, f}), {2, 2}, DType::f32, {1, 2, 0.5, 1.5});
  check_values(cat({i, f, d}), {3, 2}, DType::f64, {1, 2, 0.5, 1.5, 0.25, 0.75});
  check_values(cat({bools({true, false}, {2}), i32s({7}, {1})}), {3}, DType::i32, {1, 0, 7});
  Tensor t = f32s({1, 2, 3, 4, 5, 6}, {2, 3});
  check_values(cat({t.t(), t.t().slice(1, 1, 2)}, 1), {3, 3}, {1, 4, 4, 2, 5, 5, 3, 6, 6});
}

BOOST_AUTO_TEST_CASE(stack_adds_a_new_dim) {
  Tensor a = f32s({1, 2, 3}), b = f32s({4, 5, 6});
  check_values(stack({a, b}), {2, 3}, {1, 2, 3, 4, 5, 6});
  check_values(stack({a, b}, 1), {3, 2}, {1, 4, 2, 5, 3, 6});
  check_values(stack({a, b}, -1), {3, 2}, {1, 4, 2, 5, 3, 6});
  check_values(stack({scalar_tensor(1), scalar_tensor(2)}), {2}, {1, 2});
  Tensor m = f32s({1, 2, 3, 4}, {2, 2});
  check_values(stack({m, m.t()}, 1), {2, 2, 2}, {1, 2, 1, 3, 3, 4, 2, 4});
}

BOOST_AUTO_TEST_CASE(pad_fills_before_and_after_from_the_last_dim) {
  Tensor x = f32s({1, 2, 3, 4}, {2, 2});
  check_values(pad(x, {1, 2}), {2, 5}, {0, 1, 2, 0, 0, 0, 3, 4, 0, 0});
  check_values(pad(x, {0, 1, 1, 0}, -1), {3, 3}, {-1, -1, -1, 1, 2, -1, 3, 4, -1});
  check_values(pad(x, {}), {2, 2}, {1, 2, 3, 4});
  check_values(pad(i64s({7}), {2, 0}, 9), {3}, DType::i64, {9, 9, 7});
  check_values(pad(x.t(), {0, 0, 1, 1}, 0.5), {4, 2}, {0.5, 0.5, 1, 3, 2, 4, 0.5, 0.5});
  Tensor p3 = pad(ones({1, 1, 1}), {1, 1, 1, 1, 1, 1}, 0);
  BOOST_TEST(shape_str(p3.shape()) == "[3, 3, 3]");
  auto v = p3.to_vector<double>();
  BOOST_TEST(v[13] == 1.0);
  BOOST_TEST(sum(p3).item() == 1.0);
}

// ---- matmul and linear ----

BOOST_AUTO_TEST_CASE(matmul_of_two_matrices_matches_eigen) {
  auto av = host_random(3 * 4, -1, 1, 1), bv = host_random(4 * 5, -1, 1, 2);
  RowMat want = as_matrix(av, 0, 3, 4) * as_matrix(bv, 0, 4, 5);
  check_close(matmul(f64s(av, {3, 4}), f64s(bv, {4, 5})), {3, 5}, as_vector(want), 1e-14, 1e-15);
  auto af = as_f32(av), bf = as_f32(bv);
  RowMat wantf = as_matrix(af, 0, 3, 4) * as_matrix(bf, 0, 4, 5);
  Tensor y = matmul(typed(DType::f32, af, {3, 4}), typed(DType::f32, bf, {4, 5}));
  BOOST_TEST(y.dtype() == DType::f32);
  check_close(y, {3, 5}, as_vector(wantf), 1e-6, 1e-6);
  // Transposed operands: a^T (stored as [4, 3]) @ b.
  Tensor at = f64s(as_vector(as_matrix(av, 0, 3, 4).transpose()), {4, 3}).t();
  check_close(matmul(at, f64s(bv, {4, 5})), {3, 5}, as_vector(want), 1e-14, 1e-15);
}

BOOST_AUTO_TEST_CASE(batched_matmul_broadcasts_batch_dims) {
  // [2, 1, 3, 4] @ [5, 4, 2] -> [2, 5, 3, 2]
  auto av = host_random(2 * 3 * 4, -1, 1, 3), bv = host_random(5 * 4 * 2, -1, 1, 4);
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 5; ++j) {
      RowMat p = as_matrix(av, i * 12, 3, 4) * as_matrix(bv, j * 8, 4, 2);
      auto pv = as_vector(p);
      want.insert(want.end(), pv.begin(), pv.end());
    }
  check_close(matmul(f64s(av, {2, 1, 3, 4}), f64s(bv, {5, 4, 2})), {2, 5, 3, 2}, want, 1e-14,
              1e-15);
  // Plain batch: [3, 2, 2] @ [3, 2, 2].
  auto cv = iota(12), dv = iota(12, 0.5, -2);
  std::vector<double> want2;
  for (int b = 0; b < 3; ++b) {
    auto pv = as_vector(as_matrix(cv, b * 4, 2, 2) * as_matrix(dv, b * 4, 2, 2));
    want2.insert(want2.end(), pv.begin(), pv.end());
  }
  check_values(matmul(f64s(cv, {3, 2, 2}), f64s(dv, {3, 2, 2})), {3, 2, 2}, want2);
  // Batched @ matrix.
  std::vector<double> want3;
  for (int b = 0; b < 3; ++b) {
    auto pv = as_vector(as_matrix(cv, b * 4, 2, 2) * as_matrix(dv, 0, 2, 2));
    want3.insert(want3.end(), pv.begin(), pv.end());
  }
  check_values(matmul(f64s(cv, {3, 2, 2}), f64s(dv, {3, 2, 2}).select(0, 0)), {3, 2, 2}, want3);
}

BOOST_AUTO_TEST_CASE(matmul_with_one_dimensional_operands) {
  auto a = iota(3, 1, 1);   // [1, 2, 3]
  auto m = iota(6, 1, -2);  // 2x3 or 3x2
  check_values(matmul(f64s(a), f64s({4, 5, 6})), {}, {32});
  // mat [2, 3] @ vec [3]
  auto mv = as_vector(as_matrix(m, 0, 2, 3) * as_matrix(a, 0, 3, 1));
  check_values(matmul(f64s(m, {2, 3}), f64s(a)), {2}, mv);
  // vec [3] @ mat [3, 2]
  auto vm = as_vector(as_matrix(a, 0, 1, 3) * as_matrix(m, 0, 3, 2));
  check_values(matmul(f64s(a), f64s(m, {3, 2})), {2}, vm);
  // vec [3] @ batched [2, 3, 1]
  std::vector<double> bv = {1, 0, 2, -1, 1, 1};
  check_values(matmul(f64s(a), f64s(bv, {2, 3, 1})), {2, 1}, {7, 4});
  // batched [2, 1, 3] @ vec [3]
  check_values(matmul(f64s(bv, {2, 1, 3}), f64s(a)), {2, 1}, {7, 4});
}

BOOST_AUTO_TEST_CASE(matmul_with_an_empty_inner_dim_is_zero) {
  check_values(matmul(zeros({2, 0}), zeros({0, 3})), {2, 3}, std::vector<double>(6, 0));
  check_values(matmul(zeros({0, 4}), zeros({4, 3})), {0, 3}, {});
}

BOOST_AUTO_TEST_CASE(matmul_of_integer_and_half_operands) {
  Tensor a = i64s({1, 2, 3, 4}, {2, 2}), b = i64s({5, 6, 7, 8}, {2, 2});
  check_values(matmul(a, b), {2, 2}, DType::i64, {19, 22, 43, 50});
  check_values(matmul(i32s({1, 2}, {1, 2}), f32s({0.5f, 0.25f}, {2, 1})), {1, 1}, DType::f32, {1});
  auto av = round_to(DType::f16, host_random(8 * 16, -1, 1, 5));
  auto bv = round_to(DType::f16, host_random(16 * 4, -1, 1, 6));
  auto want = round_to(DType::f16, as_vector(as_matrix(av, 0, 8, 16) * as_matrix(bv, 0, 16, 4)));
  Tensor y = matmul(typed(DType::f16, av, {8, 16}), typed(DType::f16, bv, {16, 4}));
  BOOST_TEST(y.dtype() == DType::f16);
  check_close(y, {8, 4}, want, 0x1.0p-10, 1e-3);
  auto bw = round_to(DType::bf16, bv);
  Tensor mixed = matmul(typed(DType::f16, av, {8, 16}), typed(DType::bf16, bw, {16, 4}));
  BOOST_TEST(mixed.dtype() == DType::f32);
  check_close(mixed, {8, 4}, as_vector(as_matrix(av, 0, 8, 16) * as_matrix(bw, 0, 16, 4)), 1e-6,
              1e-6);
}

BOOST_AUTO_TEST_CASE(linear_is_x_times_weight_transposed_plus_bias) {
  auto xv = host_random(2 * 3 * 4, -1, 1, 7), wv = host_random(5 * 4, -1, 1, 8);
  std::vector<double> bv = {0.5, -1, 2, 0, 0.25};
  RowMat w = as_matrix(wv, 0, 5, 4);
  std::vector<double> want, want_bias;
  for (int b = 0; b < 2; ++b) {
    RowMat y = as_matrix(xv, b * 12, 3, 4) * w.transpose();
    auto yv = as_vector(y);
    want.insert(want.end(), yv.begin(), yv.end());
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 5; ++c) want_bias.push_back(y(r, c) + bv[c]);
  }
  Tensor x = f64s(xv, {2, 3, 4}), weight = f64s(wv, {5, 4}), bias = f64s(bv);
  check_close(linear(x, weight), {2, 3, 5}, want, 1e-14, 1e-15);
  check_close(linear(x, weight, bias), {2, 3, 5}, want_bias, 1e-14, 1e-15);
  check_close(linear(x.select(0, 1).select(0, 2), weight, bias), {5},
              std::vector<double>(want_bias.begin() + 25, want_bias.end()), 1e-14, 1e-15);
}

BOOST_AUTO_TEST_SUITE_END()
