// How a pointwise launch walks its domain (jit/codegen/pointwise_layout), on the host: merged
// dims and 32-bit pieces must visit every element at the offsets the original strides give
// (checked by enumerating both), and the vector path is taken exactly when every tensor is
// aligned and steps contiguously (or not at all) along a vector.
#include <boost/test/unit_test.hpp>

#include <map>

#include "jit/codegen/pointwise_layout.h"

using namespace kiln::jit::codegen;

namespace {

// Element index -> offset in each read, by walking `space` coordinate by coordinate (the last
// dim fastest), shifted by `first` and `offsets`.
using Walk = std::map<std::int64_t, std::vector<std::int64_t>>;

void walk(const IterSpace& s, std::int64_t first, const std::vector<std::int64_t>& offsets,
          Walk& out) {
  std::size_t rank = s.sizes.size();
  std::vector<std::int64_t> at(rank, 0);
  for (std::int64_t i = 0; i < s.numel(); ++i) {
    std::vector<std::int64_t> o = offsets;
    for (std::size_t k = 0; k < o.size(); ++k)
      for (std::size_t d = 0; d < rank; ++d) o[k] += at[d] * s.strides[k][d];
    if (!out.emplace(first + i, o).second) BOOST_FAIL("element " << first + i << " twice");
    for (std::size_t d = rank; d-- > 0;) {
      if (++at[d] < s.sizes[d]) break;
      at[d] = 0;
    }
  }
}

Walk walk(const IterSpace& s) {
  Walk w;
  walk(s, 0, std::vector<std::int64_t>(s.strides.size(), 0), w);
  return w;
}

Walk walk(const std::vector<IterPiece>& pieces) {
  Walk w;
  for (const auto& p : pieces) walk(p.space, p.first, p.read_offsets, w);
  return w;
}

using Sizes = std::vector<std::int64_t>;

}  // namespace

BOOST_AUTO_TEST_SUITE(codegen_pointwise_layout)

BOOST_AUTO_TEST_CASE(contiguous_dims_merge_and_the_rank_is_kept) {
  // Contiguous [3, 4, 5] and a broadcast over the last dim: one dim of 60 for the first, the
  // second cannot follow the first across the inner dim.
  IterSpace contiguous{{3, 4, 5}, {{20, 5, 1}}};
  IterSpace m = merge_dims(contiguous);
  BOOST_TEST(m.sizes == (Sizes{1, 1, 60}), "");
  BOOST_TEST(m.strides[0] == (Sizes{0, 0, 1}), "");
  IterSpace bias{{3, 4, 5}, {{20, 5, 1}, {0, 0, 1}}};
  m = merge_dims(bias);
  BOOST_TEST(m.sizes == (Sizes{1, 12, 5}), "");
  BOOST_TEST(m.strides[1] == (Sizes{0, 0, 1}), "");
  // A column broadcast merges its outer dims (0 == 0 * 4), a size-1 dim disappears.
  IterSpace column{{3, 1, 4, 5}, {{20, 20, 5, 1}, {1, 0, 0, 0}}};
  m = merge_dims(column);
  BOOST_TEST(m.sizes == (Sizes{1, 1, 3, 20}), "");
  BOOST_TEST(m.strides[1] == (Sizes{0, 0, 1, 0}), "");
  // A transposed read merges nothing.
  IterSpace transposed{{4, 6}, {{1, 4}}};
  BOOST_TEST(merge_dims(transposed).sizes == (Sizes{4, 6}), "");
  for (const IterSpace* s : {&contiguous, &bias, &column, &transposed})
    BOOST_TEST((walk(merge_dims(*s)) == walk(*s)));
}

BOOST_AUTO_TEST_CASE(a_space_that_fits_is_one_piece) {
  IterSpace s{{256, 1024}, {{1024, 1}, {0, 1}}};
  BOOST_TEST(fits_index(s));
  auto pieces = split_for_index(s);
  BOOST_TEST_REQUIRE(pieces.size() == 1u);
  BOOST_TEST(pieces[0].first == 0);
  BOOST_TEST(pieces[0].space.sizes == s.sizes, "");
}

// Sizes past 2^31 cannot be allocated here: the selection is checked on the host, at the real
// limit for the counts and with a small one for the offsets (test_codegen_pointwise_vector runs
// kernels on such pieces).
BOOST_AUTO_TEST_CASE(spaces_past_32_bit_indices_are_cut_into_pieces_that_fit) {
  // 3 * 2^30 contiguous elements: numel past the limit, one dim after merging.
  IterSpace big = merge_dims({{3, std::int64_t{1} << 30}, {{std::int64_t{1} << 30, 1}}});
  BOOST_TEST(!fits_index(big));
  auto pieces = split_for_index(big);
  BOOST_TEST(pieces.size() == 2u);  // (2^31 - 1) + (2^30 + 1)
  std::int64_t next = 0;
  for (const auto& p : pieces) {
    BOOST_TEST(fits_index(p.space));
    BOOST_TEST(p.first == next);
    BOOST_TEST(p.read_offsets[0] == p.first);
    next += p.space.numel();
  }
  BOOST_TEST(next == 3 * (std::int64_t{1} << 30));
  // Offsets past the limit with few elements: an expanded-looking stride of 2^31.
  IterSpace far{{4, 8}, {{std::int64_t{1} << 31, 1}}};
  BOOST_TEST(!fits_index(far));
  BOOST_TEST(split_for_index(far).size() == 4u);
  for (const auto& p : split_for_index(far)) BOOST_TEST(fits_index(p.space));

  // Small limits visit every element exactly once at its own offsets.
  std::vector<IterSpace> spaces{
      {{10, 7}, {{7, 1}}},
      {{5, 6, 7}, {{1, 5, 30}, {0, 7, 1}}},
      {{3, 4, 50}, {{200, 50, 1}, {0, 0, 1}, {1, 3, 12}}},
  };
  for (std::int64_t limit : {20, 64, 100, 1000}) {
    for (const auto& s : spaces) {
      BOOST_TEST_CONTEXT("limit " << limit << ", " << s.sizes.size() << " dims") {
        auto cut = split_for_index(s, limit);
        BOOST_TEST((walk(cut) == walk(s)));
        for (const auto& p : cut) {
          BOOST_TEST(fits_index(p.space, limit));
          BOOST_TEST(p.space.sizes.size() == s.sizes.size());
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(the_vector_path_needs_aligned_tensors_stepping_contiguously) {
  IterSpace rows{{1, 8, 64}, {{0, 64, 1}, {0, 0, 1}}};  // a matrix and a bias row
  TensorAccess f32{4096, 4}, misaligned{4100, 4};
  std::vector<TensorAccess> out{{8192, 4}};
  BOOST_TEST(plan_vectors(rows, 4, std::vector{f32, f32}, out) == 8 * 64 / 4);
  BOOST_TEST(plan_vectors(rows, 4, std::vector{f32, misaligned}, out) == 0);
  BOOST_TEST(plan_vectors(rows, 4, std::vector{f32, f32}, std::vector{misaligned}) == 0);
  // A column (or a scalar) the kernel reads one element per vector of: its alignment does not
  // matter, but it must be constant along the vector, and the others must not be.
  IterSpace column{{1, 8, 64}, {{0, 64, 1}, {0, 1, 0}}};
  TensorAccess splat{4100, 4, true};
  BOOST_TEST(plan_vectors(column, 4, std::vector{f32, splat}, out) == 128);
  BOOST_TEST(plan_vectors(column, 4, std::vector{f32, f32}, out) == 0);
  BOOST_TEST(plan_vectors(rows, 4, std::vector{f32, splat}, out) == 0);
  // An inner size the width does not divide: vectors would straddle rows.
  IterSpace odd{{1, 8, 6}, {{0, 6, 1}}};
  BOOST_TEST(plan_vectors(odd, 4, std::vector{f32}, out) == 0);
  // One dim: the tail past the last vector is left to the scalar loop.
  IterSpace flat{{1, 1, 1003}, {{0, 0, 1}}};
  BOOST_TEST(plan_vectors(flat, 4, std::vector{f32}, out) == 250);
  BOOST_TEST(plan_vectors(flat, 4, std::vector{misaligned}, out) == 0);
  // An outer stride the width does not divide (rows of 64 in a buffer of rows of 66).
  IterSpace padded{{1, 8, 64}, {{0, 66, 1}}};
  BOOST_TEST(plan_vectors(padded, 4, std::vector{f32}, out) == 0);
  // A read stepping across the vector (transposed).
  IterSpace transposed{{1, 8, 64}, {{0, 1, 8}}};
  BOOST_TEST(plan_vectors(transposed, 4, std::vector{f32}, out) == 0);
  // A 2-byte tensor at 8 bytes past a boundary: aligned for 4 elements, not for 8.
  TensorAccess half{4104, 2};
  BOOST_TEST(plan_vectors(rows, 4, std::vector{half, half}, out) == 128);
  BOOST_TEST(plan_vectors(rows, 8, std::vector{half, half}, out) == 0);
}

BOOST_AUTO_TEST_SUITE_END()
