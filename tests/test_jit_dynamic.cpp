// Dynamic dims: automatic after the first size-induced recompile, mark_dynamic up front, and
// specialization wherever the traced code depends on a size's value.
#include <boost/test/unit_test.hpp>

#include "autograd/nn.h"
#include "autograd/ops.h"
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

// A dim that stays static says so under KILN_LOG=recompiles, naming the op to blame: here a cat
// along it, whose output size the symbols do not track on the device.
BOOST_AUTO_TEST_CASE(kiln_log_names_the_op_that_keeps_a_dim_static) {
  setenv("KILN_LOG", "recompiles", 1);
  reload_log_settings();
  test::ScopeExit restore([] {
    unsetenv("KILN_LOG");
    reload_log_settings();
  });
  jit::CompileOptions options;
  options.name = "grow";
  options.arg_names = {"cache", "row"};
  auto f = jit::compile([](const Tensor& a, const Tensor& b) { return cat({a, b}, 2) * 2.0; },
                        options);
  Tensor row = ones({2, 4, 1}).to(Device::cuda());
  std::string err = test::capture_output(2, [&] {
    f(ones({2, 4, 8}).to(Device::cuda()), row);
    f(ones({2, 4, 9}).to(Device::cuda()), row);
  });
  BOOST_TEST(err.find("kiln: 'grow' keeps 'cache' dim 2 static, as cat (%") != std::string::npos,
             err);
  BOOST_TEST(err.find(") computes a size its symbols do not track") != std::string::npos, err);
  BOOST_TEST(f.core().num_entries() == 2u);
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
// length kiln does not track, which a kernel cannot be sized by, so the dim specializes.
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
