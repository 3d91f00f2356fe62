// A kernel is its code: the same block rendered from several places of a function, from two
// functions, or for a dynamic dim after a static one, is one NVRTC compile and one cache entry.
// And a warm launch reads its plan's resolved function: no lookup by source.
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "autograd/ops.h"
#include "cache/kernel_key.h"
#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/launch_stats.h"
#include "jit/compile.h"
#include "support/cache_env.h"
#include "support/device_compare.h"
#include "support/temp_dir.h"

using namespace kiln;
using test::relative_error;

namespace {

std::int64_t compiles() {
  return jit::codegen::launch_stats().compiles.load();
}

// Entries stored under the test's cache directory.
std::size_t entries(const test::TempDir& dir) {
  return std::filesystem::exists(dir / "kernels") ? test::entry_names(dir.path()).size() : 0;
}

Tensor on_device(const Tensor& t) {
  return t.to(Device::cuda());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(kernel_code)

BOOST_AUTO_TEST_CASE(comment_lines_and_blank_lines_are_not_code) {
  std::string source =
      "// k_add: a comment naming graph 'g' and %3: f32[32, 96]\n"
      "#include <cuda_fp16.h>\n"
      "\n"
      "extern \"C\" __global__ void k_add(float* x) {\n"
      "    // the row's first items\n"
      "  x[0] += 1.0f;  // a trailing comment is code's\n"
      "}\n";
  BOOST_TEST(cache::kernel_code(source) ==
             "#include <cuda_fp16.h>\n"
             "extern \"C\" __global__ void k_add(float* x) {\n"
             "  x[0] += 1.0f;  // a trailing comment is code's\n"
             "}\n");
}

BOOST_AUTO_TEST_CASE(keys_ignore_comments_and_follow_code) {
  std::vector<std::string> options = {"-arch=compute_90"};
  auto key = [&](std::string_view source) {
    return cache::kernel_key({source, options, "compute_90", "13.0:lib", 1});
  };
  std::string code = "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }\n";
  BOOST_TEST(key("// from graph 'a', %3: f32[32, 96]\n" + code) ==
             key("// from graph 'b', %7: f32[s0, 96]\n" + code));
  BOOST_TEST(key(code) != key("extern \"C\" __global__ void k(float* x) { x[0] = 2.0f; }\n"));
  // A comment ending in a backslash swallows the next line: it stays part of the code.
  BOOST_TEST(cache::kernel_code("// spliced \\\nint a;\n") == "// spliced \\\nint a;\n");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(one_compile_per_code)

BOOST_AUTO_TEST_CASE(three_identical_normalizations_in_one_function_compile_once) {
  test::TempDir dir;
  test::CacheEnv env(dir.path());
  // The 0.8125 makes this block's code unlike any other test's, so this test compiles it.
  auto block = [](const Tensor& x) { return layer_norm(x * 0.8125, {96}); };
  auto f = jit::compile([&](const Tensor& a, const Tensor& b, const Tensor& c) {
    return std::vector<Tensor>{block(a), block(b), block(c)};
  });
  std::vector<Tensor> in = {randn({8, 96}), randn({8, 96}), randn({8, 96})};
  auto before = compiles();
  auto got = f(on_device(in[0]), on_device(in[1]), on_device(in[2]));
  BOOST_TEST(compiles() - before == 1);
  BOOST_TEST(entries(dir) == 1u);
  BOOST_TEST(f.core().plan(0)->kernel_count() == 3);
  for (int i = 0; i < 3; ++i) BOOST_TEST(relative_error(got[i], block(in[i])) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(two_functions_with_the_same_block_share_its_kernel) {
  test::TempDir dir;
  test::CacheEnv env(dir.path());
  auto f = jit::compile([](const Tensor& x) { return softmax(x * 0.6875, -1); });
  // Another function: its graph has an unused argument first, so its value numbers differ.
  auto g = jit::compile([](const Tensor& unused, const Tensor& x) {
    (void)unused;
    return softmax(x * 0.6875, -1);
  });
  Tensor x = randn({4, 40});
  auto before = compiles();
  Tensor a = f(on_device(x));
  BOOST_TEST(compiles() - before == 1);
  Tensor b = g(on_device(randn({2})), on_device(x));
  BOOST_TEST(compiles() - before == 1);
  BOOST_TEST(entries(dir) == 1u);
  BOOST_TEST(relative_error(a, softmax(x * 0.6875, -1)) <= 1e-5);
  BOOST_TEST(relative_error(b, softmax(x * 0.6875, -1)) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(a_dynamic_dim_recompile_with_unchanged_kernels_compiles_nothing) {
  test::TempDir dir;
  test::CacheEnv env(dir.path());
  auto fn = [](const Tensor& x, const Tensor& w) { return rms_norm(x * 0.5625, {96}, w) + x; };
  auto f = jit::compile(fn);
  Tensor w = randn({96});
  Tensor x32 = randn({32, 96}), x48 = randn({48, 96});
  auto before = compiles();
  f(on_device(x32), on_device(w));
  auto first = compiles() - before;
  BOOST_TEST(first >= 1);
  Tensor got = f(on_device(x48), on_device(w));  // a size guard fails: dim 0 becomes symbolic
  BOOST_TEST(f.core().num_entries() == 2u);
  BOOST_TEST(f.core().graph(1).str().find("s0") != std::string::npos);
  BOOST_TEST(compiles() - before == first);
  BOOST_TEST(relative_error(got, fn(x48, w)) <= 1e-5);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(warm_launches)

BOOST_AUTO_TEST_CASE(a_warm_call_launches_resolved_functions_without_lookups) {
  auto f = jit::compile([](const Tensor& x) { return softmax(gelu(x) * 1.5, -1) + x; });
  Tensor x = randn({6, 24});
  Tensor dx = on_device(x);
  f(dx);
  int kernels = f.core().plan(0)->kernel_count();
  auto& s = jit::codegen::launch_stats();
  std::int64_t hits = s.cache_hits, built = s.compiles, launches = s.launches;
  for (int i = 0; i < 10; ++i) f(dx);
  BOOST_TEST(s.cache_hits - hits == 0);  // no memory-cache lookup by code
  BOOST_TEST(s.compiles - built == 0);
  BOOST_TEST(s.launches - launches == 10 * kernels);
  BOOST_TEST(relative_error(f(dx), softmax(gelu(x) * 1.5, -1) + x) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(threads_calling_one_compiled_function_get_their_own_results) {
  auto f = jit::compile([](const Tensor& x) { return layer_norm(x, {32}) * 2.0 + 1.0; });
  f(on_device(randn({4, 32})));  // compiled here; the threads run warm calls
  constexpr int kThreads = 4, kCalls = 20;
  std::vector<Tensor> inputs;
  for (int t = 0; t < kThreads; ++t) inputs.push_back(randn({4, 32}));
  std::vector<Tensor> outputs(kThreads);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        Tensor x = on_device(inputs[t]);
        for (int i = 0; i < kCalls; ++i) outputs[t] = f(x);
      } catch (const std::exception&) {
        ++failures;
      }
    });
  for (auto& th : threads) th.join();
  BOOST_TEST(failures.load() == 0);
  for (int t = 0; t < kThreads; ++t)
    BOOST_TEST(relative_error(outputs[t], layer_norm(inputs[t], {32}) * 2.0 + 1.0) <= 1e-5);
  BOOST_TEST(f.core().num_entries() == 1u);
}

BOOST_AUTO_TEST_SUITE_END()
