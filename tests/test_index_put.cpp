// index_put / Tensor::index_put_ (self[indices] = values): eagerly on the CPU and CUDA against a
// plain loop over the indices on the host, compiled against eager on copies of the inputs
// (writes to an intermediate, an argument, a module buffer and a view), gradients against finite
// differences, and the errors.
#include <boost/test/unit_test.hpp>

#include <vector>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "jit/compile.h"
#include "support/compiled_gradients.h"
#include "support/gradcheck_support.h"
#include "support/reference.h"

using namespace kiln;
using test::f64s;
using test::i64s;

namespace {

const Device kDevices[] = {Device::cpu(), Device::cuda()};

Tensor on(const Tensor& t, Device d) {
  return t.to(d).clone();
}

std::vector<double> host(const Tensor& t) {
  return t.to(Device::cpu()).to_vector<double>();
}

// self with, for each entry j, the row self[at[0][j], ..., at[k-1][j]] set to (or, accumulating,
// increased by) row j of `rows` ([N, inner] values): the definition, one entry at a time.
std::vector<double> put_loop(const Tensor& self, const std::vector<std::vector<std::int64_t>>& at,
                             const std::vector<double>& rows, bool accumulate) {
  std::vector<double> out = host(self);
  const Shape& shape = self.shape();
  std::int64_t inner = 1;
  for (std::size_t d = at.size(); d < shape.size(); ++d) inner *= shape[d];
  for (std::size_t j = 0; j < at[0].size(); ++j) {
    std::int64_t row = 0;
    for (std::size_t d = 0; d < at.size(); ++d) {
      std::int64_t i = at[d][j];
      row = row * shape[d] + (i < 0 ? i + shape[d] : i);
    }
    for (std::int64_t e = 0; e < inner; ++e) {
      double& o = out[row * inner + e];
      o = (accumulate ? o : 0.0) + rows[j * inner + e];
    }
  }
  return out;
}

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && host(a) == host(b);
}

// Counts of labels kept as a buffer, updated in place with duplicates summed.
class LabelCounts : public nn::Module {
 public:
  explicit LabelCounts(std::int64_t n) : weight(ones({n})), counts(zeros({n})) {
    register_parameter("weight", weight);
    register_buffer("counts", counts);
  }
  Tensor forward(const Tensor& x, const Tensor& labels) {
    {
      NoGradGuard no_grad;
      counts.index_put_({labels}, ones_like(labels).to(DType::f32), true);
    }
    return x * weight;
  }
  Tensor weight, counts;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(indexed_writes)

BOOST_AUTO_TEST_CASE(rows_at_a_1d_index_match_a_host_loop) {
  Tensor x = randn({5, 3}, DType::f64), v = randn({3, 3}, DType::f64);
  std::vector<std::int64_t> at = {4, 0, -3};
  auto want = put_loop(x, {at}, host(v), false);
  auto want_sum = put_loop(x, {at}, host(v), true);
  for (Device d : kDevices) {
    Tensor idx = i64s(at).to(d);
    test::check_values(index_put(on(x, d), {idx}, on(v, d)).to(Device::cpu()), {5, 3}, want);
    test::check_values(index_put(on(x, d), {i64s({}).to(d)}, scalar_tensor(1.0, DType::f64).to(d))
                           .to(Device::cpu()),
                       {5, 3}, host(x));  // no index: nothing written
    // As PyTorch, a CPU index serves a CUDA self.
    test::check_values(index_put(on(x, d), {i64s(at)}, on(v, d)).to(Device::cpu()), {5, 3}, want);
    Tensor t = on(x, d);
    BOOST_TEST(&t.index_put_({idx.to(DType::i32)}, on(v, d)) == &t);
    test::check_values(t.to(Device::cpu()), {5, 3}, want);
    test::check_values(index_put(on(x, d), {idx}, on(v, d), true).to(Device::cpu()), {5, 3},
                       want_sum);
  }
}

// cache[b, h, pos] = k with b a column, h a row and pos a number: the three broadcast to [2, 3].
BOOST_AUTO_TEST_CASE(a_kv_cache_write_with_broadcast_index_tensors_matches_a_host_loop) {
  Tensor cache = randn({2, 4, 6, 5}), k = randn({2, 3, 5});
  std::vector<std::vector<std::int64_t>> at = {{0, 0, 0, 1, 1, 1}, {3, 1, 2, 3, 1, 2}, {}};
  at[2].assign(6, 4);
  auto want = put_loop(cache, at, host(k), false);
  for (Device d : kDevices) {
    Tensor batch = i64s({0, 1}, {2, 1}).to(d), head = i64s({3, 1, 2}, {1, 3}).to(d);
    Tensor pos = scalar_tensor(4, DType::i64).to(d);
    Tensor c = on(cache, d);
    c.index_put_({batch, head, pos}, on(k, d));
    test::check_values(c.to(Device::cpu()), {2, 4, 6, 5}, want);
  }
}

// Values broadcast to the indexed shape: a number for every element, a row for every index.
BOOST_AUTO_TEST_CASE(values_broadcast_to_the_indexed_shape) {
  Tensor x = randn({4, 3}), row = randn({3});
  std::vector<double> row_twice = host(row), row_thrice;
  row_twice.insert(row_twice.end(), row_twice.begin(), row_twice.end());
  row_thrice = row_twice;
  row_thrice.insert(row_thrice.end(), row_twice.begin(), row_twice.begin() + 3);
  for (Device d : kDevices) {
    Tensor idx = i64s({2, 0, 2}).to(d);  // 2 twice: equal values land as they are
    test::check_values(index_put(on(x, d), {idx}, scalar_tensor(7.0f).to(d)).to(Device::cpu()),
                       {4, 3}, put_loop(x, {{2, 0}}, std::vector<double>(6, 7.0), false));
    test::check_values(index_put(on(x, d), {idx}, on(row, d)).to(Device::cpu()), {4, 3},
                       put_loop(x, {{2, 0}}, row_twice, false));
    test::check_close(index_put(on(x, d), {idx}, on(row, d), true).to(Device::cpu()), {4, 3},
                      put_loop(x, {{2, 0, 2}}, row_thrice, true), 1e-6, 1e-6);
  }
}

BOOST_AUTO_TEST_CASE(accumulate_sums_duplicates_and_overwrite_takes_their_mean) {
  Tensor x = randn({4, 2}, DType::f64), v = f64s({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  std::vector<std::int64_t> at = {1, 3, 1, 1};
  auto want_sum = put_loop(x, {at}, host(v), true);
  std::vector<double> want_mean = host(x);
  want_mean[2] = (1 + 5 + 7) / 3.0;
  want_mean[3] = (2 + 6 + 8) / 3.0;
  want_mean[6] = 3;
  want_mean[7] = 4;
  Tensor counts = zeros({3}, DType::i64);
  for (Device d : kDevices) {
    Tensor idx = i64s(at).to(d);
    test::check_close(index_put(on(x, d), {idx}, on(v, d), true).to(Device::cpu()), {4, 2},
                      want_sum, 1e-13, 1e-13);
    test::check_close(index_put(on(x, d), {idx}, on(v, d)).to(Device::cpu()), {4, 2}, want_mean,
                      1e-13, 1e-13);
    // A histogram of integers: exact.
    Tensor c = on(counts, d);
    c.index_put_({i64s({2, 0, 2, 2}).to(d)}, scalar_tensor(1, DType::i64).to(d), true);
    test::check_values(c.to(Device::cpu()), {3}, {1, 0, 3});
    Tensor seen = zeros({4}, DType::bool_).to(d);
    seen.index_put_({i64s({3, 1, 3}).to(d)}, test::bools({true, true, true}, {3}).to(d));
    test::check_values(seen.to(Device::cpu()), {4}, {0, 1, 0, 1});
  }
}

// An undefined Tensor is a full slice: x[:, idx] and x[idx0, :, idx2] as PyTorch lays them out
// (adjacent index tensors keep their place; separated ones put the broadcast dims first).
BOOST_AUTO_TEST_CASE(full_slices_before_and_between_index_tensors) {
  Tensor x = randn({3, 4, 2}, DType::f64);
  Tensor v1 = randn({3, 2, 2}, DType::f64), v2 = randn({2, 4}, DType::f64);
  std::vector<double> want1 = host(x), want2 = host(x), a = host(v1), b = host(v2);
  std::int64_t cols[] = {3, 0}, first[] = {2, 0}, last[] = {1, 0};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j)
      for (int e = 0; e < 2; ++e) want1[(i * 4 + cols[j]) * 2 + e] = a[(i * 2 + j) * 2 + e];
  for (int j = 0; j < 2; ++j)
    for (int m = 0; m < 4; ++m) want2[(first[j] * 4 + m) * 2 + last[j]] = b[j * 4 + m];
  for (Device d : kDevices) {
    test::check_values(
        index_put(on(x, d), {Tensor(), i64s({3, 0}).to(d)}, on(v1, d)).to(Device::cpu()), {3, 4, 2},
        want1);
    test::check_values(
        index_put(on(x, d), {i64s({2, 0}).to(d), Tensor(), i64s({1, 0}).to(d)}, on(v2, d))
            .to(Device::cpu()),
        {3, 4, 2}, want2);
  }
}

// A bool mask of self's leading shape: a where when the values broadcast past the mask, and
// eagerly the masked positions in order when values has one row per true element.
BOOST_AUTO_TEST_CASE(a_bool_mask_index) {
  Tensor x = randn({3, 2}), rows = randn({2, 2});
  Tensor mask = test::bools({true, false, true}, {3});
  std::vector<double> r = host(rows);
  for (Device d : kDevices) {
    test::check_values(
        index_put(on(x, d), {mask.to(d)}, scalar_tensor(-1.0f).to(d)).to(Device::cpu()), {3, 2},
        put_loop(x, {{0, 2}}, std::vector<double>(4, -1.0), false));
    test::check_values(index_put(on(x, d), {mask.to(d)}, on(rows, d)).to(Device::cpu()), {3, 2},
                       put_loop(x, {{0, 2}}, r, false));
    test::check_close(index_put(on(x, d), {mask.to(d)}, on(rows, d), true).to(Device::cpu()),
                      {3, 2}, put_loop(x, {{0, 2}}, r, true), 1e-6, 1e-6);
  }
}

BOOST_AUTO_TEST_CASE(compiled_writes_to_an_intermediate_match_eager) {
  auto fn = [](const Tensor& x, const Tensor& idx, const Tensor& dup, const Tensor& v) {
    Tensor h = x * 2.0;
    h.index_put_({idx}, v);
    h.index_put_({dup}, v * 3.0, true);
    h.index_put_({idx, dup}, v.sum({1}));
    return h + 1.0;
  };
  Tensor x = randn({5, 4}), v = randn({3, 4});
  Tensor idx = i64s({4, 1, -2}), dup = i64s({1, 1, 0});
  Tensor want = fn(x, idx, dup, v);
  for (Device d : kDevices) {
    auto f = jit::compile(fn);
    Tensor got = f(on(x, d), idx.to(d), dup.to(d), on(v, d));
    BOOST_TEST(test::relative_error(got.to(Device::cpu()), want) < 1e-6, d.str());
  }
}

// A KV cache argument written at [batch, head, pos] on each step lands in the caller's tensor.
BOOST_AUTO_TEST_CASE(a_compiled_write_to_an_argument_is_written_back) {
  auto step = [](const Tensor& cache, const Tensor& heads, const Tensor& pos, const Tensor& k) {
    Tensor batch = arange(2.0).reshape({2, 1}).to(cache.device());
    cache.index_put_({batch, heads, pos}, k);
    return cache.sum({2});
  };
  Tensor cache0 = zeros({2, 3, 5, 4});
  for (Device d : kDevices) {
    Tensor want_cache = cache0.clone(), got_cache = on(cache0, d);
    auto f = jit::compile(step);
    for (int p = 0; p < 3; ++p) {
      Tensor heads = i64s({2, 0}, {1, 2}), pos = scalar_tensor(p, DType::i64), k = randn({2, 2, 4});
      Tensor want = step(want_cache, heads, pos, k);
      Tensor got = f(got_cache, heads.to(d), pos.to(d), on(k, d));
      BOOST_TEST(test::relative_error(got.to(Device::cpu()), want) < 1e-6, d.str() << " " << p);
      BOOST_TEST(same(got_cache, want_cache), d.str() << " step " << p);
    }
  }
}

// A write through a view (a window of a cache) lands in the base, eagerly and compiled.
BOOST_AUTO_TEST_CASE(a_write_into_a_slice_of_a_cache_lands_in_the_cache) {
  auto fn = [](const Tensor& cache, const Tensor& pos, const Tensor& k) {
    Tensor window = cache.slice(1, 2, 6);
    window.index_put_({Tensor(), pos}, k);
    Tensor h = cache * 1.0;
    h.slice(0, 1, 2).index_put_({Tensor(), pos.slice(0, 0, 1)},
                                k.slice(0, 0, 1).slice(1, 0, 1) * -1.0);
    return h;
  };
  Tensor cache0 = randn({2, 8, 3}), k = randn({2, 2, 3});
  Tensor pos = i64s({3, 0});
  Tensor want_cache = cache0.clone();
  Tensor want = fn(want_cache, pos, k);
  std::vector<double> loop = host(cache0), kv = host(k);
  for (int b = 0; b < 2; ++b)
    for (int j = 0; j < 2; ++j)
      for (int e = 0; e < 3; ++e)
        loop[(b * 8 + 2 + pos.to_vector<std::int64_t>()[j]) * 3 + e] = kv[(b * 2 + j) * 3 + e];
  test::check_values(want_cache, {2, 8, 3}, loop);
  for (Device d : kDevices) {
    Tensor got_cache = on(cache0, d);
    auto f = jit::compile(fn);
    Tensor got = f(got_cache, pos.to(d), on(k, d));
    BOOST_TEST(same(got_cache, want_cache), d.str());
    BOOST_TEST(test::relative_error(got.to(Device::cpu()), want) < 1e-6, d.str());
  }
}

// A buffer counted with accumulate (duplicate labels) inside a compiled training step.
BOOST_AUTO_TEST_CASE(a_module_buffer_accumulated_in_a_compiled_step_matches_eager) {
  for (Device d : kDevices) {
    LabelCounts eager(4), compiled(4);
    for (LabelCounts* m : {&eager, &compiled}) m->to(d);
    auto loss = [](LabelCounts& m, const Tensor& x, const Tensor& labels) {
      Tensor y = m.forward(x, labels);
      return (y * y).sum();
    };
    jit::CompileOptions options;
    options.modules = {&compiled};
    auto f = jit::compile(
        [&](const Tensor& x, const Tensor& labels) { return loss(compiled, x, labels); }, options);
    for (int step = 0; step < 3; ++step) {
      Tensor x = randn({5, 4}).to(d), labels = randint(0, 4, {5}).to(d);
      loss(eager, x, labels).backward();
      f(x, labels).backward();
      BOOST_TEST(same(compiled.counts, eager.counts), d.str() << " step " << step);
      BOOST_TEST(test::relative_error(compiled.weight.grad().to(Device::cpu()),
                                      eager.weight.grad().to(Device::cpu())) < 1e-6);
    }
    BOOST_TEST(host(compiled.counts.sum()) == std::vector<double>{15.0});
    BOOST_TEST(f.core().num_entries() == 1u);
  }
}

// Sizes that change between calls: a dim past the indexed ones stays symbolic in index_put (one
// dynamic entry serves them all); the indexed dim's size scales the flattened index, so it is
// specialized. In place, the write itself reads the written tensor's shape (as every in-place
// method does), so those calls get an entry per size; either way the results are eager's.
BOOST_AUTO_TEST_CASE(compiled_calls_at_other_sizes_match_eager) {
  auto put = [](const Tensor& x, const Tensor& idx, const Tensor& v) {
    return index_put(x * 2.0, {idx}, v);
  };
  auto put_ = [](const Tensor& x, const Tensor& idx, const Tensor& v) {
    Tensor h = x * 2.0;
    h.index_put_({idx}, v);
    return h;
  };
  auto f = jit::compile(put);
  auto f_ = jit::compile(put_);
  for (std::int64_t m : {3, 5, 7}) {
    Tensor x = randn({4, m}), v = randn({2, m}), idx = i64s({3, 1});
    Tensor want = put(x, idx, v);
    BOOST_TEST(same(f(x, idx, v), want), "m = " << m);
    BOOST_TEST(same(f_(x, idx, v), want), "m = " << m);
  }
  BOOST_TEST(f.core().num_entries() <= 2u);
  auto g = jit::compile(put_);
  for (std::int64_t n : {4, 6, 9}) {
    Tensor x = randn({n, 3}), v = randn({2, 3}), idx = i64s({-1, 2});
    BOOST_TEST(same(g(x, idx, v), put(x, idx, v)), "n = " << n);
  }
}

BOOST_AUTO_TEST_CASE(gradients_match_finite_differences) {
  Tensor idx = i64s({3, 0}), dup = i64s({1, 3, 1});
  Tensor self = test::uniform({4, 3}, -1, 1, 1);
  Tensor v = test::uniform({2, 3}, -1, 1, 2), v3 = test::uniform({3, 3}, -1, 1, 3);
  Tensor row = test::uniform({3}, -1, 1, 4), cols = test::uniform({4, 2}, -1, 1, 5);
  test::check("overwrite", [&](const auto& in) { return index_put(in[0], {idx}, in[1]); },
              {self, v});
  test::check("accumulate duplicates",
              [&](const auto& in) { return index_put(in[0], {dup}, in[1], true); }, {self, v3});
  test::check("overwrite duplicates (their mean)",
              [&](const auto& in) { return index_put(in[0], {dup}, in[1]); }, {self, v3});
  test::check("a broadcast row", [&](const auto& in) { return index_put(in[0], {dup}, in[1]); },
              {self, row});
  test::check("a full slice",
              [&](const auto& in) {
                return index_put(in[0], {Tensor(), i64s({2, 0})}, in[1]);
              },
              {self, cols});
  test::check("in place on an intermediate",
              [&](const auto& in) {
                Tensor h = in[0] * 2.0;
                h.index_put_({idx}, in[1] * in[1]);
                return h * in[0];
              },
              {self, v});
  test::check("a bool mask",
              [&](const auto& in) {
                return index_put(in[0], {test::bools({false, true, true, false}, {4})}, in[1]);
              },
              {self, v});
}

BOOST_AUTO_TEST_CASE(compiled_gradients_through_index_put_match_eager) {
  auto loss = [](const Tensor& x, const Tensor& w) {
    Tensor h = x * 3.0;
    Tensor idx = i64s({2, 0}).to(x.device()), dup = i64s({1, 1}).to(x.device());
    h.index_put_({idx}, w * w);
    h.index_put_({dup}, w, true);
    return (h * h).sum();
  };
  test::check_compiled_gradients(loss, loss, {4, 3}, {2, 3});
}

BOOST_AUTO_TEST_CASE(errors_name_index_put_and_the_shapes) {
  Tensor x = randn({4, 3}), idx = i64s({1, 2});
  KILN_CHECK_THROWS(index_put(x, {idx, idx, idx}, randn({2})), IndexError, "index_put: 3 indices",
                    "for self of shape [4, 3] (want 1 to 2)");
  KILN_CHECK_THROWS(index_put(x, {idx.to(DType::f32)}, randn({2, 3})), DTypeError,
                    "index_put: index 0 has dtype f32");
  KILN_CHECK_THROWS(index_put(x, {idx}, randn({3, 3})), ShapeError,
                    "index_put: values of shape [3, 3] do not broadcast to the indexed shape [2, "
                    "3] (self of shape [4, 3], indices (i64 [2]))");
  KILN_CHECK_THROWS(index_put(x, {idx, i64s({0, 1, 2})}, randn({2})), ShapeError,
                    "index_put: indices (i64 [2], i64 [3]) do not broadcast together");
  KILN_CHECK_THROWS(index_put(x, {idx}, randn({2, 3}, DType::f64)), DTypeError,
                    "index_put: values (f64) must have self's dtype (f32)");
  KILN_CHECK_THROWS(
      index_put(x, {i64s({1, 4})}, randn({2, 3})), IndexError,
      "index_put: index 4 is out of range for dim 0 of size 4 (self of shape [4, 3])");
  KILN_CHECK_THROWS(index_put(x, {idx, i64s({-4, 0})}, randn({2})), IndexError,
                    "index_put: index -4 is out of range for dim 1 of size 3");
  KILN_CHECK_THROWS(index_put(x, {Tensor()}, randn({3})), IndexError,
                    "index_put: indices (:) hold no index tensor");
  KILN_CHECK_THROWS(index_put(x, {test::bools({true, false, true, false}, {4}), idx}, randn({3})),
                    IndexError, "index_put: a bool mask index must be the only index");
  KILN_CHECK_THROWS(index_put(gt(x, 0.0), {idx}, gt(randn({3}), 0.0), true), DTypeError,
                    "index_put: accumulate=true needs a numeric self, not bool");
  Tensor leaf = randn({4, 3}).requires_grad_();
  KILN_CHECK_THROWS(leaf.index_put_({idx}, randn({3})), AutogradError,
                    "index_put_: a leaf tensor of shape [4, 3] that requires grad");
  // Where the indices are not at hand, index_add reports the position out of range.
  Tensor c = x.to(Device::cuda());
  c.index_put_({i64s({1, 7}).to(Device::cuda())}, randn({2, 3}).to(Device::cuda()));
  KILN_CHECK_THROWS(c.to(Device::cpu()), IndexError, "index_add: index 4 is out of range");
  auto f = jit::compile(
      [](const Tensor& t, const Tensor& i) { return index_put(t, {i}, t.slice(0, 0, 2)); });
  KILN_CHECK_THROWS(f(x, i64s({0, -5})), IndexError, "index_add: index 4 is out of range");
  auto masked = jit::compile(
      [](const Tensor& t, const Tensor& m) { return index_put(t, {m}, t.slice(0, 0, 2)); });
  KILN_CHECK_THROWS(masked(x, test::bools({true, false, true, false}, {4})), ShapeError,
                    "index_put: inside a compiled function a bool mask index takes values that "
                    "broadcast to [3]");
}

BOOST_AUTO_TEST_SUITE_END()
