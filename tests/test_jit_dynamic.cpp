// Dynamic dims: automatic after the first size-induced recompile, mark_dynamic up front, and
// specialization wherever the traced code depends on a size's value.
#include <boost/test/unit_test.hpp>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "jit/codegen/launch_stats.h"
#include "jit/compile.h"
#include "runtime/log.h"
#include "support/capture_output.h"
#include "support/device_compare.h"
#include "support/scope_exit.h"

using namespace kiln;

namespace {
bool identical(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to_vector<double>() == b.to_vector<double>();
}
}  // namespace

BOOST_AUTO_TEST_SUITE(dynamic_dims)

BOOST_AUTO_TEST_CASE(after_one_size_recompile_ten_more_batch_sizes_reuse_one_entry) {
  Generator g(1);
  nn::Linear fc(8, 4, true, DType::f32, &g);
  auto model = [&](const Tensor& x) {
    return log_softmax(gelu(fc(x)), 1).mean({0}).sum() + layer_norm(x, {8}).sum({0});
  };
  jit::CompileOptions options;
  options.name = "mlp";
  auto f = jit::compile(model, options);
  f(randn({2, 8}, DType::f32, &g));
  f(randn({3, 8}, DType::f32, &g));  // the one recompile: dim 0 becomes symbolic
  BOOST_TEST(f.core().num_entries() == 2u);
  BOOST_TEST(f.core().guards(1).tensors[0].symbols[0] == 0);
  for (std::int64_t batch = 4; batch < 14; ++batch) {
    Tensor x = randn({batch, 8}, DType::f32, &g);
    BOOST_TEST(identical(f(x), model(x)), "batch " << batch);
  }
  BOOST_TEST(f.core().num_entries() == 2u);
  BOOST_TEST(f.core().stats().hits == 10);
  BOOST_TEST(f.core().graph(1).str().find("f32[s0, 8] argument") != std::string::npos);
}

// A dim that stays static says so under KILN_LOG=recompiles, naming the op to blame: here a
// slice to the end of it, which records that end as the traced size.
BOOST_AUTO_TEST_CASE(kiln_log_names_the_op_that_keeps_a_dim_static) {
  setenv("KILN_LOG", "recompiles", 1);
  reload_log_settings();
  test::ScopeExit restore([] {
    unsetenv("KILN_LOG");
    reload_log_settings();
  });
  jit::CompileOptions options;
  options.name = "tail";
  options.arg_names = {"cache", "row"};
  auto f = jit::compile(
      [](const Tensor& a, const Tensor& b) { return exp(a).slice(2, 1, 1000) + b; }, options);
  Tensor row = ones({2, 4, 1}).to(Device::cuda());
  std::string err = test::capture_output(2, [&] {
    f(ones({2, 4, 8}).to(Device::cuda()), row);
    f(ones({2, 4, 9}).to(Device::cuda()), row);
  });
  BOOST_TEST(
      err.find("kiln: 'tail' keeps 'cache' dim 2 static, as traced at other sizes it "
               "differs (op 1 of the trace was slice(dim=2, start=1, end=9") != std::string::npos,
      err);
  BOOST_TEST(f.core().num_entries() == 2u);
}

// A cat along a dim that changes between calls keeps it symbolic: its size is the sum of its
// inputs' (s0 + 1), and a kernel is sized by it at each call.
BOOST_AUTO_TEST_CASE(a_cat_along_a_dynamic_dim_keeps_it_symbolic_on_cuda) {
  auto scaled = [](const Tensor& a, const Tensor& b) { return cat({a, b}, 2) * 2.0; };
  auto summed = [](const Tensor& a, const Tensor& b) { return sum(cat({a, b}, 2), {2}); };
  auto padded = [](const Tensor& a, const Tensor& b) { return pad(a, {1, 2}) * b.sum(); };
  auto fs = jit::compile(scaled);
  auto fr = jit::compile(summed);
  auto fp = jit::compile(padded);
  Tensor b = randn({2, 4, 1});
  Tensor cb = b.to(Device::cuda());
  for (std::int64_t n = 3; n < 8; ++n) {
    Tensor a = randn({2, 4, n});
    Tensor ca = a.to(Device::cuda());
    BOOST_TEST(test::relative_error(fs(ca, cb).to(Device::cpu()), scaled(a, b)) < 1e-6, "n " << n);
    BOOST_TEST(test::relative_error(fr(ca, cb).to(Device::cpu()), summed(a, b)) < 1e-6, "n " << n);
    BOOST_TEST(test::relative_error(fp(ca, cb).to(Device::cpu()), padded(a, b)) < 1e-6, "n " << n);
  }
  BOOST_TEST(fs.core().num_entries() == 2u);
  BOOST_TEST(fr.core().num_entries() == 2u);
  BOOST_TEST(fp.core().num_entries() == 2u);
  BOOST_TEST(fs.core().graph(1).str().find("[2, 4, s0 + 1]") != std::string::npos,
             fs.core().graph(1).str());
  // One index-aware kernel at every size: the cat's split point s0 is its argument.
  auto& stats = jit::codegen::launch_stats();
  Tensor a = randn({2, 4, 11}).to(Device::cuda());
  auto before = stats.launches.load();
  fs(a, cb);
  BOOST_TEST(stats.launches.load() - before == 1);
  BOOST_TEST(fs.core().stats().hits == 4);
}

// A pad that crops makes s0 - 2, which the guards hold at >= 2 as they hold a symbol: a call
// where it would be 1 traces an entry of its own instead of running a kernel sized wrongly.
BOOST_AUTO_TEST_CASE(a_size_that_subtracts_is_guarded_at_two_or_more) {
  auto cropped = [](const Tensor& a) { return pad(a, {0, -2}) * 3.0; };
  auto f = jit::compile(cropped);
  for (std::int64_t n : {6, 7, 9, 3, 8}) {
    Tensor a = randn({2, n});
    BOOST_TEST(test::relative_error(f(a.to(Device::cuda())).to(Device::cpu()), cropped(a)) < 1e-6,
               "n " << n);
  }
  BOOST_TEST(f.core().num_entries() == 3u);  // 6; s0 >= 2 with s0 - 2 >= 2; 3
  jit::GuardFailure failure;
  std::vector<std::int64_t> symbols;
  Tensor three = randn({2, 3}).to(Device::cuda());
  std::vector<jit::CallArg> args{{true, &three, 0.0}};
  BOOST_TEST(!f.core().guards(1).check(args, symbols, &failure));
  BOOST_TEST(failure.reason == "size s0 - 2 is 1 with s0 = 3, and must be >= 2 as when traced",
             failure.reason);
}

// The decode step of one attention layer whose KV cache grows by a cat along the sequence dim
// (Hugging Face's DynamicCache): after the one size-induced recompile, every later length runs
// the same entry.
BOOST_AUTO_TEST_CASE(a_kv_cache_grown_by_cat_for_32_steps_traces_twice) {
  const std::int64_t B = 2, H = 4, d = 16;
  Generator g(7);
  Tensor wq = randn({H * d, H * d}, DType::f32, &g) * 0.1;
  Tensor wk = randn({H * d, H * d}, DType::f32, &g) * 0.1;
  Tensor wv = randn({H * d, H * d}, DType::f32, &g) * 0.1;
  auto step = [&](const Tensor& x, const Tensor& wq, const Tensor& wk, const Tensor& wv,
                  const Tensor& k_cache, const Tensor& v_cache) {
    auto heads = [&](const Tensor& t) { return t.reshape({B, 1, H, d}).permute({0, 2, 1, 3}); };
    Tensor q = heads(matmul(x, wq)), k = cat({k_cache, heads(matmul(x, wk))}, 2),
           v = cat({v_cache, heads(matmul(x, wv))}, 2);
    Tensor att = softmax(matmul(q, k.transpose(-1, -2)) * (1.0 / 4.0), -1);
    return std::vector<Tensor>{matmul(att, v), k, v};
  };
  auto f = jit::compile(step);
  Tensor k_cache = randn({B, H, 1, d}, DType::f32, &g),
         v_cache = randn({B, H, 1, d}, DType::f32, &g);
  Tensor ck = k_cache.to(Device::cuda()), cv = v_cache.to(Device::cuda());
  Tensor cwq = wq.to(Device::cuda()), cwk = wk.to(Device::cuda()), cwv = wv.to(Device::cuda());
  for (int t = 0; t < 32; ++t) {
    Tensor x = randn({B, 1, H * d}, DType::f32, &g);
    auto want = step(x, wq, wk, wv, k_cache, v_cache);
    auto got = f(x.to(Device::cuda()), cwq, cwk, cwv, ck, cv);
    BOOST_TEST(test::relative_error(got[0].to(Device::cpu()), want[0]) < 1e-5, "step " << t);
    BOOST_TEST(identical(got[1].to(Device::cpu()), want[1]), "step " << t);
    k_cache = want[1];
    v_cache = want[2];
    ck = got[1];
    cv = got[2];
  }
  BOOST_TEST(f.core().num_entries() <= 2u);
  BOOST_TEST(f.core().stats().hits >= 30);
}

BOOST_AUTO_TEST_CASE(sizes_zero_and_one_stay_specialized) {
  auto f = jit::compile([](const Tensor& x) { return x * 2.0; });
  f(ones({4}));
  f(ones({5}));
  f(ones({6}));
  BOOST_TEST(f.core().num_entries() == 2u);
  f(ones({1}));  // broadcasting-relevant: a new static entry
  f(ones({0}));
  BOOST_TEST(f.core().num_entries() == 4u);
  BOOST_TEST(f(ones({0})).numel() == 0);
}

BOOST_AUTO_TEST_CASE(mark_dynamic_makes_the_first_entry_symbolic) {
  auto f = jit::compile([](const Tensor& x, const Tensor& y) { return (x + y).sum({1}); });
  Tensor x = ones({3, 5}), y = ones({3, 5});
  jit::mark_dynamic(x, 1);
  jit::mark_dynamic(y, 1);
  f(x, y);
  for (std::int64_t n = 2; n < 9; ++n)
    BOOST_TEST(f(ones({3, n}), ones({3, n})).to_vector<float>()[0] == 2.0f * n);
  BOOST_TEST(f.core().num_entries() == 1u);
  // Equal symbolic sizes share a symbol, and that is guarded.
  BOOST_TEST(f.core().guards(0).num_symbols == 1);
  BOOST_CHECK_THROW(f(ones({3, 4}), ones({3, 6})), ShapeError);  // a new static trace rejects it
}

BOOST_AUTO_TEST_CASE(always_mode_starts_symbolic_and_never_mode_never_is) {
  jit::CompileOptions always;
  always.dynamic = jit::DynamicMode::always;
  auto fa = jit::compile([](const Tensor& x) { return x.sum({0}); }, always);
  for (std::int64_t n = 2; n < 6; ++n)
    BOOST_TEST(fa(ones({n, 3})).to_vector<float>()[1] == float(n));
  BOOST_TEST(fa.core().num_entries() == 1u);
  jit::CompileOptions never;
  never.dynamic = jit::DynamicMode::never;
  auto fn = jit::compile([](const Tensor& x) { return x.sum({0}); }, never);
  for (std::int64_t n = 2; n < 6; ++n) fn(ones({n, 3}));
  BOOST_TEST(fn.core().num_entries() == 4u);
}

BOOST_AUTO_TEST_CASE(reading_a_size_in_arithmetic_specializes_the_dim) {
  auto scale_by_batch = [](const Tensor& x) { return x * static_cast<double>(x.size(0)); };
  auto f = jit::compile(scale_by_batch);
  for (std::int64_t n = 2; n < 6; ++n) {
    Tensor x = ones({n, 2});
    BOOST_TEST(identical(f(x), scale_by_batch(x)), "n " << n);
  }
  // Every size needed its own trace: the entries are static.
  BOOST_TEST(f.core().num_entries() == 4u);
  BOOST_TEST(f.core().guards(3).tensors[0].symbols[0] == -1);
}

BOOST_AUTO_TEST_CASE(shape_dependent_control_flow_stays_correct) {
  auto branchy = [](const Tensor& x) { return x.size(0) > 4 ? x * 10.0 : x - 1.0; };
  auto f = jit::compile(branchy);
  for (std::int64_t n : {2, 3, 4, 5, 6, 3, 8}) {
    Tensor x = ones({n});
    BOOST_TEST(identical(f(x), branchy(x)), "n " << n);
  }
}

BOOST_AUTO_TEST_CASE(sizes_baked_into_constants_by_library_code_are_caught) {
  // slice to "all but the last" bakes the size into the slice bounds: not symbolic-safe.
  auto drop_last = [](const Tensor& x) { return x.slice(0, 0, -1).sum(); };
  auto f = jit::compile(drop_last);
  for (std::int64_t n = 2; n < 7; ++n) {
    Tensor x = arange(0, static_cast<double>(n), 1, DType::f32);
    BOOST_TEST(identical(f(x), drop_last(x)), "n " << n);
  }
}

BOOST_AUTO_TEST_CASE(reshape_that_keeps_the_batch_dim_stays_symbolic) {
  auto fn = [](const Tensor& x) { return x.unsqueeze(1).squeeze(1).reshape({-1, 2, 3}).sum({2}); };
  auto f = jit::compile(fn);
  f(ones({2, 6}));
  f(ones({3, 6}));
  for (std::int64_t n = 4; n < 8; ++n) BOOST_TEST(identical(f(ones({n, 6})), fn(ones({n, 6}))));
  BOOST_TEST(f.core().num_entries() == 2u);
}

// Every dim starts symbolic; the sliced dim changes between calls. A slice that ends before the
// dim keeps a constant length, so one entry serves every size; one that runs to the end has a
// length kiln does not track (it records its end as the traced size), so the dim specializes.
BOOST_AUTO_TEST_CASE(slices_of_computed_values_with_every_dim_dynamic_run_on_cuda) {
  jit::CompileOptions always;
  always.dynamic = jit::DynamicMode::always;
  auto head = [](const Tensor& a, const Tensor& b) {
    return exp(a).slice(1, 1, 3) * (b * 2.0).slice(1, 1, 3);
  };
  auto tail = [](const Tensor& a, const Tensor& b) {
    return exp(a).slice(1, 1, 1000) * (b * 2.0).slice(1, 1, 1000);
  };
  auto fh = jit::compile(head, always);
  auto ft = jit::compile(tail, always);
  for (std::int64_t n = 4; n < 7; ++n) {
    Tensor a = randn({n - 1, n}), b = randn({n - 1, n});
    Tensor ca = a.to(Device::cuda()), cb = b.to(Device::cuda());
    BOOST_TEST(test::relative_error(fh(ca, cb).to(Device::cpu()), head(a, b)) < 1e-6, "n " << n);
    BOOST_TEST(test::relative_error(ft(ca, cb).to(Device::cpu()), tail(a, b)) < 1e-6, "n " << n);
  }
  BOOST_TEST(fh.core().num_entries() == 1u);
  BOOST_TEST(ft.core().num_entries() == 3u);
}

BOOST_AUTO_TEST_SUITE_END()
