// Tensor basics: dtype sizes, names and promotion; shapes and strides; view ops that share
// storage (reshape/view, permute, transpose, t, expand, slice, squeeze, unsqueeze, select,
// flatten); contiguous, clone, dtype conversion (f16/bf16 rounding included), item, to_vector,
// printing and allclose. References are hand-computed values and Eigen's half/bfloat16.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <sstream>

#include "support/reference.h"

using namespace kiln;
using namespace kiln::test;

BOOST_AUTO_TEST_SUITE(tensor)

// ---- dtypes ----

BOOST_AUTO_TEST_CASE(every_dtype_has_its_itemsize_and_name) {
  BOOST_TEST(itemsize(DType::bool_) == 1u);
  BOOST_TEST(itemsize(DType::i32) == 4u);
  BOOST_TEST(itemsize(DType::i64) == 8u);
  BOOST_TEST(itemsize(DType::f16) == 2u);
  BOOST_TEST(itemsize(DType::bf16) == 2u);
  BOOST_TEST(itemsize(DType::f32) == 4u);
  BOOST_TEST(itemsize(DType::f64) == 8u);
  BOOST_TEST(dtype_name(DType::bool_) == "bool");
  BOOST_TEST(dtype_name(DType::i32) == "i32");
  BOOST_TEST(dtype_name(DType::i64) == "i64");
  BOOST_TEST(dtype_name(DType::f16) == "f16");
  BOOST_TEST(dtype_name(DType::bf16) == "bf16");
  BOOST_TEST(dtype_name(DType::f32) == "f32");
  BOOST_TEST(dtype_name(DType::f64) == "f64");
  BOOST_TEST(fmt::format("{}", DType::bf16) == "bf16");
  BOOST_TEST(is_floating(DType::f16));
  BOOST_TEST(!is_floating(DType::i64));
  BOOST_TEST(is_integral(DType::i32));
  BOOST_TEST(!is_integral(DType::bool_));
  for (DType t : kAllDTypes) BOOST_TEST(zeros({3}, t).dtype() == t);
}

// Row/column order: bool, i8, i32, i64, f16, bf16, f32, f64.
constexpr DType kPromotion[8][8] = {
    {DType::bool_, DType::i8, DType::i32, DType::i64, DType::f16, DType::bf16, DType::f32,
     DType::f64},
    {DType::i8, DType::i8, DType::i32, DType::i64, DType::f16, DType::bf16, DType::f32, DType::f64},
    {DType::i32, DType::i32, DType::i32, DType::i64, DType::f16, DType::bf16, DType::f32,
     DType::f64},
    {DType::i64, DType::i64, DType::i64, DType::i64, DType::f16, DType::bf16, DType::f32,
     DType::f64},
    {DType::f16, DType::f16, DType::f16, DType::f16, DType::f16, DType::f32, DType::f32,
     DType::f64},
    {DType::bf16, DType::bf16, DType::bf16, DType::bf16, DType::f32, DType::bf16, DType::f32,
     DType::f64},
    {DType::f32, DType::f32, DType::f32, DType::f32, DType::f32, DType::f32, DType::f32,
     DType::f64},
    {DType::f64, DType::f64, DType::f64, DType::f64, DType::f64, DType::f64, DType::f64,
     DType::f64},
};

BOOST_AUTO_TEST_CASE(promote_types_follows_category_then_width_table) {
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) {
      BOOST_TEST_CONTEXT(dtype_name(kAllDTypes[i]) << " with " << dtype_name(kAllDTypes[j])) {
        BOOST_TEST(dtype_name(promote_types(kAllDTypes[i], kAllDTypes[j])) ==
                   dtype_name(kPromotion[i][j]));
      }
    }
}

BOOST_AUTO_TEST_CASE(binary_op_result_dtype_follows_promotion_table) {
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) {
      if (i == 0 && j == 0) continue;  // bool + bool is rejected (test_errors)
      Tensor a = ones({2}, kAllDTypes[i]), b = ones({2}, kAllDTypes[j]);
      Tensor c = a + b;
      BOOST_TEST_CONTEXT(dtype_name(kAllDTypes[i]) << " + " << dtype_name(kAllDTypes[j])) {
        BOOST_TEST(dtype_name(c.dtype()) == dtype_name(kPromotion[i][j]));
        check_values(c, {2}, {2.0, 2.0});
      }
    }
  // f16 + bf16 widens to f32 and keeps both values exactly.
  Tensor h = typed(DType::f16, {1.0 / 3}, {1}), b = typed(DType::bf16, {1.0 / 3}, {1});
  Tensor s = h + b;
  BOOST_TEST(s.dtype() == DType::f32);
  double want = static_cast<float>(f16(1.0f / 3)) + static_cast<float>(bf16(1.0f / 3));
  BOOST_TEST(s.item() == static_cast<float>(want));
}

BOOST_AUTO_TEST_CASE(scalars_adopt_the_tensor_dtype_unless_their_category_is_higher) {
  using Kind = Scalar::Kind;
  BOOST_TEST(scalar_result_type(DType::i64, Kind::floating) == DType::f32);
  BOOST_TEST(scalar_result_type(DType::bool_, Kind::integer) == DType::i64);
  BOOST_TEST(scalar_result_type(DType::bool_, Kind::boolean) == DType::bool_);
  BOOST_TEST(scalar_result_type(DType::i32, Kind::integer) == DType::i32);
  BOOST_TEST(scalar_result_type(DType::f16, Kind::floating) == DType::f16);
  BOOST_TEST(scalar_result_type(DType::f64, Kind::integer) == DType::f64);

  Tensor half = i64s({1, 2, 3}) * 0.5;
  check_values(half, {3}, DType::f32, {0.5, 1.0, 1.5});
  Tensor inc = bools({true, false}, {2}) + 1;
  check_values(inc, {2}, DType::i64, {2, 1});
  check_values(i32s({1, 2}, {2}) + 1, {2}, DType::i32, {2, 3});
  check_values(i32s({4, 6}, {2}) * 2.5, {2}, DType::f32, {10, 15});
  check_values(typed(DType::f16, {1.5}, {1}) * 2, {1}, DType::f16, {3.0});
  check_values(bools({true, false}, {2}) * 0.5, {2}, DType::f32, {0.5, 0.0});
  check_values(3 - i64s({1, 5}), {2}, DType::i64, {2, -2});
  // How a number is written decides, not its value (C++ tells 3 from 3.0, as Python does).
  check_values(i32s({1, 2}, {2}) * 3.0, {2}, DType::f32, {3, 6});
  check_values(i32s({1, 2}, {2}) * 3, {2}, DType::i32, {3, 6});
  check_values(i64s({7}) / 2, {1}, DType::f32, {3.5});  // true division
  check_values(i64s({1}) + 2.0f, {1}, DType::f32, {3});
  // i64 numbers beyond 2^53 stay exact.
  std::int64_t big = (std::int64_t{1} << 60) + 1;
  BOOST_TEST((i64s({0}) + big).item<std::int64_t>() == big);
}

// ---- shapes and strides ----

BOOST_AUTO_TEST_CASE(contiguous_tensor_has_row_major_strides) {
  Tensor x = zeros({2, 3, 4});
  BOOST_TEST(x.strides() == (Strides{12, 4, 1}), boost::test_tools::per_element());
  BOOST_TEST(x.numel() == 24);
  BOOST_TEST(x.dim() == 3);
  BOOST_TEST(x.size(-1) == 4);
  BOOST_TEST(x.size(0) == 2);
  BOOST_TEST(x.is_contiguous());
  BOOST_TEST(shape_str(x.shape()) == "[2, 3, 4]");
  BOOST_TEST(zeros({}).numel() == 1);
  BOOST_TEST(zeros({}).dim() == 0);
  BOOST_TEST(zeros({3, 0}).numel() == 0);
  BOOST_TEST(numel(Shape{5, 0, 2}) == 0);
  BOOST_TEST(contiguous_strides({2, 0, 3}) == (Strides{3, 3, 1}), boost::test_tools::per_element());
  BOOST_TEST(shape_str({}) == "[]");
}

BOOST_AUTO_TEST_CASE(broadcast_shapes_aligns_trailing_dims) {
  BOOST_TEST(shape_str(broadcast_shapes({2, 1, 3}, {4, 1}, "t")) == "[2, 4, 3]");
  BOOST_TEST(shape_str(broadcast_shapes({}, {5}, "t")) == "[5]");
  BOOST_TEST(shape_str(broadcast_shapes({3, 0}, {1, 1}, "t")) == "[3, 0]");
}

BOOST_AUTO_TEST_CASE(reshape_of_contiguous_tensor_is_a_view_with_inferred_dim) {
  Tensor x = f32s({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor r = x.reshape({3, -1});
  check_values(r, {3, 2}, {0, 1, 2, 3, 4, 5});
  BOOST_TEST(shares_storage(r, x));
  Tensor v = x.view({6});
  BOOST_TEST(shares_storage(v, x));
  check_values(v, {6}, {0, 1, 2, 3, 4, 5});
  {
    NoGradGuard no_grad;
    v.select(0, 4).fill_(40);
  }
  BOOST_TEST(x.to_vector<float>()[4] == 40.0f);
}

BOOST_AUTO_TEST_CASE(view_of_transposed_tensor_is_rejected_but_reshape_copies) {
  Tensor x = f32s({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor t = x.t();
  BOOST_CHECK_EXCEPTION(t.view({6}), ShapeError, message_has({"view", "[3, 2]", "[6]"}));
  Tensor r = t.reshape({6});
  check_values(r, {6}, {0, 3, 1, 4, 2, 5});
  BOOST_TEST(!shares_storage(r, x));
  // Splitting a transposed dim is still a view.
  Tensor y = f32s({0, 1, 2, 3, 4, 5, 6, 7}, {2, 4}).t();  // [4, 2]
  Tensor split = y.view({2, 2, 2});
  BOOST_TEST(shares_storage(split, y));
  check_values(split, {2, 2, 2}, {0, 4, 1, 5, 2, 6, 3, 7});
}

BOOST_AUTO_TEST_CASE(permute_reorders_dims_without_copying) {
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = static_cast<float>(i);
  Tensor x = f32s(v, {2, 3, 4});
  Tensor p = x.permute({2, 0, 1});  // [4, 2, 3]
  BOOST_TEST(shares_storage(p, x));
  BOOST_TEST(p.strides() == (Strides{1, 12, 4}), boost::test_tools::per_element());
  BOOST_TEST(!p.is_contiguous());
  std::vector<double> want;
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) want.push_back(i * 12 + j * 4 + k);
  check_values(p, {4, 2, 3}, want);
  check_values(x.permute({-1, 0, 1}), {4, 2, 3}, want);
}

BOOST_AUTO_TEST_CASE(transpose_and_t_swap_dims) {
  Tensor x = f32s({1, 2, 3, 4, 5, 6}, {2, 3});
  check_values(x.t(), {3, 2}, {1, 4, 2, 5, 3, 6});
  check_values(x.transpose(0, 1), {3, 2}, {1, 4, 2, 5, 3, 6});
  check_values(x.transpose(-1, -2), {3, 2}, {1, 4, 2, 5, 3, 6});
  BOOST_TEST(shares_storage(x.t(), x));
  Tensor v = f32s({1, 2, 3});
  check_values(v.t(), {3}, {1, 2, 3});
  std::vector<float> w(24);
  for (int i = 0; i < 24; ++i) w[i] = static_cast<float>(i);
  Tensor y = f32s(w, {2, 3, 4}).transpose(0, 2);  // [4, 3, 2]
  BOOST_TEST(y.to_vector<float>()[flat_index({4, 3, 2}, {3, 1, 1})] == 1 * 12 + 1 * 4 + 3);
}

BOOST_AUTO_TEST_CASE(expand_and_broadcast_to_repeat_with_zero_strides) {
  Tensor col = f32s({1, 2, 3}, {3, 1});
  Tensor e = col.expand({2, 3, 4});
  BOOST_TEST(shares_storage(e, col));
  BOOST_TEST(e.strides() == (Strides{0, 1, 0}), boost::test_tools::per_element());
  std::vector<double> want;
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) want.push_back(i + 1);
  check_values(e, {2, 3, 4}, want);
  check_values(col.expand({-1, 2}), {3, 2}, {1, 1, 2, 2, 3, 3});
  check_values(f32s({7, 8}).broadcast_to({2, 2}), {2, 2}, {7, 8, 7, 8});
  check_values(scalar_tensor(5).expand({2}), {2}, {5, 5});
}

BOOST_AUTO_TEST_CASE(slice_with_step_and_negative_indices) {
  Tensor x = f32s({0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  check_values(x.slice(0, 1, 8, 3), {3}, {1, 4, 7});
  check_values(x.slice(0, -3, 10), {3}, {7, 8, 9});
  check_values(x.slice(0, -4, -1), {3}, {6, 7, 8});
  check_values(x.slice(0, 8, 100), {2}, {8, 9});
  check_values(x.slice(0, 5, 2), {0}, {});
  check_values(x.slice(0, -100, 2), {2}, {0, 1});
  Tensor m = f32s({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  Tensor s = m.slice(1, 1, 4, 2);  // columns 1 and 3
  BOOST_TEST(shares_storage(s, m));
  BOOST_TEST(s.offset() == 1);
  check_values(s, {3, 2}, {1, 3, 5, 7, 9, 11});
  check_values(m.slice(-2, 1, 3).slice(1, -2, 4), {2, 2}, {6, 7, 10, 11});
}

BOOST_AUTO_TEST_CASE(squeeze_and_unsqueeze_add_and_remove_unit_dims) {
  Tensor x = f32s({1, 2, 3}, {1, 3, 1});
  check_values(x.squeeze(), {3}, {1, 2, 3});
  check_values(x.squeeze(0), {3, 1}, {1, 2, 3});
  check_values(x.squeeze(-1), {1, 3}, {1, 2, 3});
  check_values(x.squeeze(1), {1, 3, 1}, {1, 2, 3});  // size 3: unchanged
  BOOST_TEST(shares_storage(x.squeeze(), x));
  Tensor v = f32s({1, 2});
  check_values(v.unsqueeze(0), {1, 2}, {1, 2});
  check_values(v.unsqueeze(1), {2, 1}, {1, 2});
  check_values(v.unsqueeze(-1), {2, 1}, {1, 2});
  check_values(scalar_tensor(4).unsqueeze(0), {1}, {4});
  check_values(f32s({9}, {1, 1}).squeeze(), {}, {9});
  BOOST_TEST(shares_storage(v.unsqueeze(0), v));
  // On a transposed view they stay views.
  Tensor t = f32s({1, 2, 3, 4, 5, 6}, {2, 3}).t();  // [3, 2]
  Tensor u = t.unsqueeze(1);
  BOOST_TEST(shares_storage(u, t));
  check_values(u, {3, 1, 2}, {1, 4, 2, 5, 3, 6});
  check_values(u.squeeze(1), {3, 2}, {1, 4, 2, 5, 3, 6});
  BOOST_TEST(shares_storage(u.squeeze(), t));
}

BOOST_AUTO_TEST_CASE(select_picks_a_row_or_column_as_a_view) {
  Tensor m = f32s({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  check_values(m.select(0, 1), {4}, {4, 5, 6, 7});
  check_values(m.select(1, 2), {3}, {2, 6, 10});
  check_values(m.select(0, -1), {4}, {8, 9, 10, 11});
  check_values(m.select(-1, -4), {3}, {0, 4, 8});
  BOOST_TEST(shares_storage(m.select(1, 2), m));
  check_values(m.select(0, 2).select(0, 3), {}, {11});
}

BOOST_AUTO_TEST_CASE(flatten_merges_a_range_of_dims) {
  Tensor x = zeros({2, 3, 4, 5});
  BOOST_TEST(shape_str(x.flatten().shape()) == "[120]");
  BOOST_TEST(shape_str(x.flatten(1).shape()) == "[2, 60]");
  BOOST_TEST(shape_str(x.flatten(1, 2).shape()) == "[2, 12, 5]");
  BOOST_TEST(shape_str(x.flatten(-2, -1).shape()) == "[2, 3, 20]");
  BOOST_TEST(shape_str(scalar_tensor(1).flatten().shape()) == "[1]");
  BOOST_TEST(shares_storage(x.flatten(), x));
  Tensor t = f32s({1, 2, 3, 4, 5, 6}, {2, 3}).t();
  check_values(t.flatten(), {6}, {1, 4, 2, 5, 3, 6});
}

BOOST_AUTO_TEST_CASE(writes_through_views_reach_the_base) {
  NoGradGuard no_grad;
  Tensor m = zeros({3, 4});
  m.slice(1, 1, 4, 2).fill_(1);               // columns 1 and 3
  m.select(0, 2).fill_(2);                    // last row
  m.t().select(0, 0).copy_(f32s({7, 8, 9}));  // first column through a transpose
  check_values(m, {3, 4}, {7, 1, 0, 1, 8, 1, 0, 1, 9, 2, 2, 2});
  Tensor v = m.view({12});
  v.slice(0, 4, 8).copy_(f32s({-1, -2, -3, -4}));
  check_values(m.select(0, 1), {4}, {-1, -2, -3, -4});
  // Broadcast copy into a strided view converts dtype.
  m.slice(0, 0, 3, 2).copy_(i64s({5, 6, 7, 8}));
  check_values(m, {3, 4}, {5, 6, 7, 8, -1, -2, -3, -4, 5, 6, 7, 8});
  Tensor u = m.unsqueeze(0).permute({2, 0, 1});
  u.fill_(3);
  check_values(m.sum(), {}, {36});
}

BOOST_AUTO_TEST_CASE(a_copy_from_memory_it_overwrites_reads_the_source_first) {
  NoGradGuard no_grad;
  Tensor a = f32s({1, 2, 3, 4}, {2, 2});
  a.copy_(a.t());  // element (0, 1) is read after (1, 0) would have overwritten it
  check_values(a, {2, 2}, {1, 3, 2, 4});
  Tensor v = f32s({1, 2, 3, 4, 5});
  v.slice(0, 1, 5).copy_(v.slice(0, 0, 4));  // a shift by one
  check_values(v, {5}, {1, 1, 2, 3, 4});
  Tensor c = f32s({1, 2, 3, 4}, {2, 2}).to(Device::cuda());
  c.copy_(c.t());
  check_values(c.to(Device::cpu()), {2, 2}, {1, 3, 2, 4});
}

// ---- copies and conversion ----

BOOST_AUTO_TEST_CASE(contiguous_copies_non_contiguous_views_in_row_major_order) {
  Tensor x = f32s({1, 2, 3, 4, 5, 6}, {2, 3});
  BOOST_TEST(x.contiguous().same(x));
  Tensor c = x.t().contiguous();
  BOOST_TEST(c.is_contiguous());
  BOOST_TEST(!shares_storage(c, x));
  BOOST_TEST(c.strides() == (Strides{2, 1}), boost::test_tools::per_element());
  check_values(c, {3, 2}, {1, 4, 2, 5, 3, 6});
  float* p = c.data<float>();
  BOOST_TEST(p[1] == 4.0f);
  BOOST_TEST(p[2] == 2.0f);
  Tensor e = f32s({1, 2}, {2, 1}).expand({2, 3}).contiguous();
  check_values(e, {2, 3}, {1, 1, 1, 2, 2, 2});
  BOOST_TEST(e.strides() == (Strides{3, 1}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(clone_is_independent_of_the_original) {
  NoGradGuard no_grad;
  Tensor x = f32s({1, 2, 3});
  Tensor c = x.clone();
  BOOST_TEST(!shares_storage(c, x));
  c.fill_(0);
  check_values(x, {3}, {1, 2, 3});
  x.fill_(5);
  check_values(c, {3}, {0, 0, 0});
  Tensor s = f32s({1, 2, 3, 4}, {2, 2}).t().clone();
  check_values(s, {2, 2}, {1, 3, 2, 4});
}

// The value a conversion from `from` to `to` must give for `v` (a value of the source dtype).
double converted(double v, DType to) {
  switch (to) {
    case DType::bool_:
      return v != 0 ? 1 : 0;
    case DType::i8:  // truncated, then wrapped modulo 256 as integers narrow
      return static_cast<double>(
          static_cast<std::int8_t>(static_cast<std::int64_t>(std::trunc(v))));
    case DType::i32:
    case DType::i64:
      return std::trunc(v);
    case DType::f16:
    case DType::bf16:
    case DType::f32:
      return round_to(to, v);
    case DType::f64:
      return v;
  }
  return v;
}

BOOST_AUTO_TEST_CASE(to_converts_between_every_pair_of_dtypes) {
  for (DType from : kAllDTypes) {
    std::vector<double> src = from == DType::bool_ ? std::vector<double>{0, 1, 1, 0}
                              : is_integral(from)  ? std::vector<double>{0, -3, 7, 1000}
                                                   : std::vector<double>{0, -1.75, 2.5, 1000.5};
    src = round_to(from, src);  // what the source dtype holds
    Tensor x = typed(from, src, {2, 2});
    for (DType to : kAllDTypes) {
      BOOST_TEST_CONTEXT(dtype_name(from) << " -> " << dtype_name(to)) {
        Tensor y = x.to(to);
        std::vector<double> want;
        for (double v : src) want.push_back(converted(v, to));
        check_values(y, {2, 2}, to, want);
        // Through a non-contiguous view too.
        check_values(x.t().to(to), {2, 2}, to, {want[0], want[2], want[1], want[3]});
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(to_half_types_rounds_to_nearest_even) {
  Tensor third = f32s({1.0f / 3});
  BOOST_TEST(third.to(DType::bf16).item() == 0.333984375);
  BOOST_TEST(third.to(DType::f16).item() == 0.333251953125);
  BOOST_TEST(third.to(DType::bf16).item() == static_cast<float>(bf16(1.0f / 3)));
  BOOST_TEST(third.to(DType::f16).item() == static_cast<float>(f16(1.0f / 3)));
  // Ties to even: 1 + 2^-8 lies halfway between bf16 neighbours 1 and 1 + 2^-7.
  Tensor ties = f64s({1 + 0x1.0p-8, 1 + 3 * 0x1.0p-8, 1 + 0x1.0p-11, 1 + 3 * 0x1.0p-11});
  check_values(ties.to(DType::bf16), {4}, {1.0, 1 + 0x1.0p-6, 1.0, 1.0});
  check_values(ties.to(DType::f16), {4}, {1 + 0x1.0p-8, 1 + 3 * 0x1.0p-8, 1.0, 1 + 0x1.0p-9});
  // f16 overflow and underflow; bf16 keeps f32's range.
  double inf = std::numeric_limits<double>::infinity();
  Tensor big = f32s({65504, 65519, 65520, 1e-8f, -1e5f, 1e38f});
  check_values(big.to(DType::f16), {6}, {65504, 65504, inf, 0, -inf, inf});
  BOOST_TEST(std::isfinite(big.to(DType::bf16).to_vector<double>()[5]));
  BOOST_TEST(std::isnan(f32s({NAN}).to(DType::f16).item()));
  BOOST_TEST(std::isnan(f32s({NAN}).to(DType::bf16).item()));
  // Smallest f16 subnormal.
  BOOST_TEST(f64s({0x1.0p-24}).to(DType::f16).item() == 0x1.0p-24);
}

BOOST_AUTO_TEST_CASE(to_bool_is_true_for_any_nonzero_value) {
  check_values(f64s({0.0, -0.0, 1e-50, NAN, -2}).to(DType::bool_), {5}, DType::bool_,
               {0, 0, 1, 1, 1});
  check_values(i64s({0, 1LL << 40, -1}).to(DType::bool_), {3}, DType::bool_, {0, 1, 1});
}

BOOST_AUTO_TEST_CASE(item_and_to_vector_read_values_in_row_major_order) {
  BOOST_TEST(scalar_tensor(2.5).item() == 2.5);
  BOOST_TEST(f32s({7}, {1, 1}).item() == 7.0);
  BOOST_TEST(i64s({-3}).item<std::int64_t>() == -3);
  BOOST_TEST(typed(DType::bf16, {0.5}, {}).item() == 0.5);
  Tensor x = i64s({1, 2, 3, 4, 5, 6}, {2, 3});
  auto v = x.t().to_vector<std::int64_t>();
  BOOST_TEST(v == (std::vector<std::int64_t>{1, 4, 2, 5, 3, 6}), boost::test_tools::per_element());
  auto f = typed(DType::f16, {0.5, -1.25}, {2}).to_vector<float>();
  BOOST_TEST(f == (std::vector<float>{0.5f, -1.25f}), boost::test_tools::per_element());
  auto b = f32s({0, 3}).to_vector<bool>();
  BOOST_TEST(!b[0]);
  BOOST_TEST(b[1]);
  BOOST_TEST(zeros({0, 3}).to_vector<float>().empty());
}

// ---- printing ----

BOOST_AUTO_TEST_CASE(printing_small_tensors_gives_exact_strings) {
  BOOST_TEST(f32s({1.5f, -2, 0.25f}).str() == "tensor([1.5000, -2.0000, 0.2500], dtype=f32)");
  BOOST_TEST(f32s({1, 2, 3, 4}, {2, 2}).str() ==
             "tensor([[1.0000, 2.0000],\n        [3.0000, 4.0000]], dtype=f32)");
  BOOST_TEST(i64s({1, -2, 30}).str() == "tensor([1, -2, 30], dtype=i64)");
  BOOST_TEST(bools({true, false}, {2}).str() == "tensor([true, false], dtype=bool)");
  BOOST_TEST(scalar_tensor(3.5).str() == "tensor(3.5000, dtype=f32)");
  BOOST_TEST(zeros({0}).str() == "tensor([], shape=[0], dtype=f32)");
  BOOST_TEST(f32s({1, 2, 3, 4}, {2, 2}).t().str() ==
             "tensor([[1.0000, 3.0000],\n        [2.0000, 4.0000]], dtype=f32)");
  BOOST_TEST(Tensor().str() == "tensor(undefined)");
  std::ostringstream os;
  os << i32s({4, 5}, {2});
  BOOST_TEST(os.str() == "tensor([4, 5], dtype=i32)");
}

BOOST_AUTO_TEST_CASE(printing_large_tensors_summarizes_the_middle) {
  std::vector<std::int64_t> v(2000);
  for (int i = 0; i < 2000; ++i) v[i] = i;
  BOOST_TEST(i64s(v).str() == "tensor([0, 1, 2, ..., 1997, 1998, 1999], dtype=i64)");
}

// ---- allclose ----

BOOST_AUTO_TEST_CASE(allclose_uses_atol_plus_rtol_times_other) {
  Tensor a = f64s({1.0, 100.0});
  BOOST_TEST(allclose(a, f64s({1.0, 100.0})));
  BOOST_TEST(allclose(a, f64s({1.0 + 5e-6, 100.0}), 1e-5, 0));
  BOOST_TEST(!allclose(a, f64s({1.0 + 2e-5, 100.0}), 1e-5, 0));
  BOOST_TEST(allclose(a, f64s({1.0, 100.05}), 1e-3, 0));
  BOOST_TEST(!allclose(a, f64s({1.0, 100.05}), 1e-4, 0));
  BOOST_TEST(allclose(a, f64s({1.0 + 1e-3, 100.0}), 0, 2e-3));
  BOOST_TEST(!allclose(a, f64s({1.0 + 1e-3, 100.0}), 0, 5e-4));
  BOOST_TEST(allclose(f32s({1, 2}), f64s({1, 2})));
  BOOST_TEST(allclose(f32s({3, 3, 3, 3}, {2, 2}), f32s({3, 3}, {2, 1})));
  BOOST_TEST(!allclose(f32s({3, 3, 3, 4}, {2, 2}), f32s({3, 3}, {2, 1})));
}

BOOST_AUTO_TEST_CASE(allclose_broadcasts_either_operand) {
  BOOST_TEST(allclose(f32s({3, 3}, {2, 1}), f32s({3, 3, 3, 3}, {2, 2})));
}

BOOST_AUTO_TEST_CASE(allclose_treats_nan_as_unequal_unless_asked_and_matches_infinities) {
  Tensor n = f64s({1.0, NAN});
  BOOST_TEST(!allclose(n, n));
  BOOST_TEST(allclose(n, n, 1e-5, 1e-8, /*equal_nan=*/true));
  BOOST_TEST(!allclose(n, f64s({1.0, 2.0}), 1e-5, 1e-8, true));
  double inf = INFINITY;
  BOOST_TEST(allclose(f64s({inf, -inf}), f64s({inf, -inf})));
  BOOST_TEST(!allclose(f64s({inf}), f64s({1e308}), 1, 1));
}

BOOST_AUTO_TEST_CASE(allclose_matches_an_infinity_only_with_the_same_infinity) {
  double inf = INFINITY;
  BOOST_TEST(!allclose(f64s({-inf}), f64s({inf})));
  BOOST_TEST(!allclose(f64s({1.0}), f64s({inf})));
}

BOOST_AUTO_TEST_SUITE_END()
