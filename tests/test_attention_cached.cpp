// cached_attention, decoding attention over a KV cache's live rows: a hand-computed case, the CPU
// op against scaled_dot_product_attention with the visible rows as an explicit mask (padding
// queries included), the split-KV CUDA kernels (the virtual GPU here) against the CPU over one
// chunk and many, grouped heads and row tiles, stale cache rows that must never be read, a
// compiled step whose CUDA graph serves every length, and the errors.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/ops.h"
#include "jit/codegen/launch_stats.h"
#include "jit/compile.h"
#include "support/reference.h"

using namespace kiln;
using kiln::test::f32s;
using kiln::test::i64s;

namespace {

std::vector<double> doubles(const Tensor& t) {
  return t.to(Device::cpu()).to(DType::f64).to_vector<double>();
}

Tensor uniform(const Shape& shape, std::uint64_t seed) {
  Generator gen(seed);
  return rand(shape, DType::f32, &gen) * 2 - 1;
}

// The visible rows as a bool mask [B, 1, T, S]: starts[b] <= j <= lengths[b] - T + t, built on the
// host from the definition.
Tensor visible_rows(const std::vector<std::int64_t>& lengths,
                    const std::vector<std::int64_t>& starts, std::int64_t time,
                    std::int64_t cache) {
  std::vector<bool> keep;
  for (std::size_t b = 0; b < lengths.size(); ++b)
    for (std::int64_t t = 0; t < time; ++t)
      for (std::int64_t j = 0; j < cache; ++j)
        keep.push_back(j >= starts[b] && j <= lengths[b] - time + t);
  return test::bools(keep, {static_cast<std::int64_t>(lengths.size()), 1, time, cache});
}

struct Case {
  std::int64_t batch, heads, kv_heads, time, cache, head_d, head_dv;
  std::vector<std::int64_t> lengths, starts;
};

// The CUDA op against the CPU op on the same (rounded) values.
void check_cuda_matches_cpu(const Case& c, DType dtype, std::uint64_t seed) {
  NoGradGuard no_grad;
  Tensor q = uniform({c.batch, c.heads, c.time, c.head_d}, seed).to(dtype);
  Tensor k = uniform({c.batch, c.kv_heads, c.cache, c.head_d}, seed + 1).to(dtype);
  Tensor v = uniform({c.batch, c.kv_heads, c.cache, c.head_dv}, seed + 2).to(dtype);
  Tensor lengths = i64s(c.lengths), starts = i64s(c.starts);
  Tensor want = cached_attention(q, k, v, lengths, starts);
  Tensor got = cached_attention(q.to(Device::cuda()), k.to(Device::cuda()), v.to(Device::cuda()),
                                lengths.to(Device::cuda()), starts.to(Device::cuda()));
  BOOST_TEST(dtype_name(got.dtype()) == dtype_name(dtype));
  double tol = dtype == DType::f32 ? 2e-6 : test::rtol_for(dtype);
  test::check_close(got.to(Device::cpu()).to(DType::f64), want.shape(), doubles(want), tol, tol);
}

}  // namespace

BOOST_AUTO_TEST_CASE(hand_computed_weights_over_the_live_rows) {
  // One query (1) against keys 0, ln 3 and two rows past the length: weights 1 and 3 of v = 1, 5.
  Tensor q = f32s({1}, {1, 1, 1, 1});
  Tensor k = f32s({0, static_cast<float>(std::log(3.0)), 5, 7}, {1, 1, 4, 1});
  Tensor v = f32s({1, 5, 100, 100}, {1, 1, 4, 1});
  Tensor out = cached_attention(q, k, v, i64s({2}), {}, 1.0);
  test::check_close(out, {1, 1, 1, 1}, {4.0}, 1e-6, 1e-6);
  // Starting at row 1: only v = 5 is seen.
  test::check_close(cached_attention(q, k, v, i64s({2}), i64s({1}), 1.0), {1, 1, 1, 1}, {5.0}, 1e-6,
                    1e-6);
  // Two new queries at positions 2 and 3 (length 4): the first sees rows 0..2, the second all.
  Tensor q2 = f32s({0, 0}, {1, 1, 2, 1});  // zero scores: plain means of v
  test::check_close(cached_attention(q2, k, v, i64s({4}), {}, 1.0), {1, 1, 2, 1},
                    {(1 + 5 + 100) / 3.0, (1 + 5 + 100 + 100) / 4.0}, 1e-6, 1e-6);
}

BOOST_AUTO_TEST_CASE(cpu_equals_attention_with_the_visible_rows_as_a_mask) {
  NoGradGuard no_grad;
  // Grouped heads (4 over 2), three new queries, a full and a left-padded sequence whose first
  // query is padding (position 2 < start 4): the mask's fully masked row gives 0, as the op's.
  const std::vector<std::int64_t> lengths{9, 5}, starts{0, 4};
  Tensor q = uniform({2, 4, 3, 6}, 11), k = uniform({2, 2, 9, 6}, 12),
         v = uniform({2, 2, 9, 5}, 13);
  Tensor got = cached_attention(q, k, v, i64s(lengths), i64s(starts), 0.7);
  Tensor want =
      scaled_dot_product_attention(q, k, v, visible_rows(lengths, starts, 3, 9), false, 0.7);
  test::check_close(got, want.shape(), want.to_vector<double>(), 1e-6, 1e-6);
  // The padding query's rows are exactly 0.
  auto padded = got.select(0, 1).select(1, 0).to(DType::f64).to_vector<double>();  // [heads, dv]
  for (double x : padded) BOOST_TEST(x == 0.0);
}

BOOST_AUTO_TEST_CASE(cuda_split_kv_kernels_equal_the_cpu) {
  // One chunk (the output written by one kernel), many chunks of a long cache with a short and a
  // long sequence, grouped heads whose query rows fill two tiles, head dims not a power of two.
  const std::vector<Case> cases{
      {1, 2, 2, 1, 40, 16, 16, {17}, {0}},
      {2, 4, 1, 1, 1000, 64, 64, {1000, 3}, {0, 0}},
      {2, 12, 4, 4, 300, 40, 24, {300, 130}, {5, 0}},
      {3, 8, 2, 2, 520, 32, 48, {2, 519, 260}, {0, 511, 100}},
  };
  std::uint64_t seed = 100;
  for (const Case& c : cases) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      BOOST_TEST_CONTEXT("cache " << c.cache << " heads " << c.heads << "/" << c.kv_heads << " T "
                                  << c.time << " " << dtype_name(dtype)) {
        check_cuda_matches_cpu(c, dtype, seed);
      }
      seed += 3;
    }
  }
}

BOOST_AUTO_TEST_CASE(cuda_never_reads_rows_outside_the_live_range) {
  NoGradGuard no_grad;
  // NaN before the start and past the length: any read of them would reach the output (a masked
  // NaN times a zero weight is NaN).
  const std::int64_t cache = 700;
  Tensor q = uniform({2, 2, 1, 32}, 31), k = uniform({2, 2, cache, 32}, 32);
  Tensor v = uniform({2, 2, cache, 32}, 33);
  const std::vector<std::int64_t> lengths{650, 90}, starts{300, 10};
  Tensor want = cached_attention(q, k, v, i64s(lengths), i64s(starts));
  Tensor nan = full({1}, std::numeric_limits<double>::quiet_NaN(), DType::f32);
  Tensor stale_k = k.clone(), stale_v = v.clone();
  for (std::int64_t b = 0; b < 2; ++b) {
    for (Tensor* t : {&stale_k, &stale_v}) {
      t->select(0, b).slice(1, 0, starts[b]).copy_(nan.expand({2, starts[b], 32}));
      t->select(0, b).slice(1, lengths[b], cache).copy_(nan.expand({2, cache - lengths[b], 32}));
    }
  }
  Tensor got =
      cached_attention(q.to(Device::cuda()), stale_k.to(Device::cuda()), stale_v.to(Device::cuda()),
                       i64s(lengths).to(Device::cuda()), i64s(starts).to(Device::cuda()));
  test::check_close(got.to(Device::cpu()), want.shape(), want.to_vector<double>(), 2e-6, 2e-6);
}

BOOST_AUTO_TEST_CASE(f64_on_cuda_runs_as_primitive_ops) {
  NoGradGuard no_grad;
  Tensor q = uniform({1, 2, 2, 8}, 41).to(DType::f64), k = uniform({1, 1, 6, 8}, 42).to(DType::f64);
  Tensor v = uniform({1, 1, 6, 8}, 43).to(DType::f64);
  Tensor want = cached_attention(q, k, v, i64s({5}), i64s({1}));
  Tensor got = cached_attention(q.to(Device::cuda()), k.to(Device::cuda()), v.to(Device::cuda()),
                                i64s({5}).to(Device::cuda()), i64s({1}).to(Device::cuda()));
  test::check_close(got.to(Device::cpu()), want.shape(), want.to_vector<double>(), 1e-12, 1e-12);
}

BOOST_AUTO_TEST_CASE(a_compiled_step_is_traced_once_and_its_graph_serves_every_length) {
  NoGradGuard no_grad;
  const std::int64_t cache = 800;
  Tensor q = uniform({1, 4, 1, 32}, 51), k = uniform({1, 2, cache, 32}, 52);
  Tensor v = uniform({1, 2, cache, 32}, 53);
  Tensor qd = q.to(Device::cuda()), kd = k.to(Device::cuda()), vd = v.to(Device::cuda());
  jit::CompileOptions options;
  options.cuda_graphs = true;
  auto f = jit::compile(
      [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lengths) {
        return cached_attention(q * 1.0, k, v, lengths);  // a kernel before it, in the graph
      },
      options);
  auto& stats = jit::codegen::launch_stats();
  std::int64_t graphs_before = stats.graph_launches;
  for (std::int64_t length : {5, 300, 799, 2, 800}) {
    BOOST_TEST_CONTEXT("length " << length) {
      Tensor want = cached_attention(q, k, v, i64s({length}));
      Tensor got = f(qd, kd, vd, i64s({length}).to(Device::cuda()));
      test::check_close(got.to(Device::cpu()), want.shape(), want.to_vector<double>(), 2e-6, 2e-6);
    }
  }
  BOOST_TEST(f.core().stats().compiles == 1);
  BOOST_TEST(stats.graph_launches - graphs_before >= 3);  // the first call records
}

BOOST_AUTO_TEST_CASE(errors_name_the_op_and_the_offending_values) {
  Tensor q = uniform({2, 4, 1, 8}, 61), k = uniform({2, 2, 6, 8}, 62),
         v = uniform({2, 2, 6, 8}, 63);
  KILN_CHECK_THROWS(cached_attention(q, k, v, i64s({3, 7})), IndexError, "cached_attention",
                    "lengths[1] = 7");
  KILN_CHECK_THROWS(cached_attention(q, k, v, i64s({3, 3}), i64s({0, -1})), IndexError,
                    "starts[1] = -1");
  KILN_CHECK_THROWS(cached_attention(q, k, v, i64s({3})), ShapeError, "lengths and starts", "[2]");
  KILN_CHECK_THROWS(cached_attention(q, k, v, test::i32s({3, 3}, {2})), DTypeError, "i64");
  KILN_CHECK_THROWS(
      cached_attention(q, uniform({2, 3, 6, 8}, 64), uniform({2, 3, 6, 8}, 65), i64s({3, 3})),
      ShapeError, "cached_attention", "[2, 4, 1, 8]", "[2, 3, 6, 8]");
  KILN_CHECK_THROWS(cached_attention(q.to(DType::f64), k, v, i64s({3, 3})), DTypeError,
                    "one floating dtype");
  Tensor trained = q.clone().requires_grad_();
  KILN_CHECK_THROWS(cached_attention(trained, k, v, i64s({3, 3})), Error, "no derivative");
  // On CUDA the kernel reports a length past the cache at the next sync.
  Tensor bad = cached_attention(q.to(Device::cuda()), k.to(Device::cuda()), v.to(Device::cuda()),
                                i64s({3, 9}).to(Device::cuda()));
  KILN_CHECK_THROWS(bad.to(Device::cpu()), IndexError, "cached_attention", "lengths[1] = 9");
}
