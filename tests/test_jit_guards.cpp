// Guards and recompilation: one recompile per guard kind with PyTorch-style reasons, none
// otherwise; the recompile limit and its eager fallback; error_on_recompile; logging.
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "autograd/ops.h"
#include "jit/codegen/lt_matmul.h"
#include "jit/compile.h"
#include "runtime/log.h"
#include "support/capture_output.h"
#include "support/scope_exit.h"

using namespace kiln;

namespace {

jit::CompileOptions named(jit::DynamicMode dynamic = jit::DynamicMode::never) {
  jit::CompileOptions o;
  o.name = "f";
  o.arg_names = {"x", "w"};
  o.dynamic = dynamic;
  return o;
}

auto make_f(jit::DynamicMode dynamic = jit::DynamicMode::never) {
  return jit::compile([](const Tensor& x, const Tensor& w) { return matmul(x, w).sum(); },
                      named(dynamic));
}

template <typename Body>
std::string capture_stderr(Body body) {
  return kiln::test::capture_output(2, body);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(guards)

BOOST_AUTO_TEST_CASE(matching_calls_never_recompile) {
  auto f = make_f();
  Tensor x = ones({2, 3}), w = ones({3, 4});
  for (int i = 0; i < 5; ++i) BOOST_TEST(f(x, w).item() == 24.0);
  BOOST_TEST(f(zeros({2, 3}), ones({3, 4})).item() == 0.0);  // new tensors, same metadata
  BOOST_TEST(f.core().num_entries() == 1u);
  BOOST_TEST(f.core().stats().hits == 5);
}

// The plan picks the f32 GEMM and attention kernels (and cuBLASLt's compute type) by
// allow_tf32(): an entry traced with it off must not serve a call made with it on.
BOOST_AUTO_TEST_CASE(flipping_matmul_tf32_traces_again_with_its_reason) {
  bool was = jit::codegen::allow_tf32();
  test::ScopeExit restore([was] { jit::codegen::set_allow_tf32(was); });
  jit::codegen::set_allow_tf32(false);
  auto f = make_f();
  Tensor x = ones({2, 3}), w = ones({3, 4});
  f(x, w);
  jit::codegen::set_allow_tf32(true);
  f(x, w);
  jit::codegen::set_allow_tf32(false);
  f(x, w);  // the first entry again
  BOOST_TEST(f.core().num_entries() == 2u);
  BOOST_TEST(f.core().stats().hits == 1);
  std::vector<std::string> expected = {
      "matmul TF32 mismatch: expected off, actual on (set_allow_tf32, KILN_MATMUL_TF32)"};
  BOOST_TEST(f.core().recompile_reasons() == expected, boost::test_tools::per_element());
  BOOST_TEST(f.core().guards(0).str().find("matmul TF32: off") != std::string::npos);
  BOOST_TEST(f.core().guards(1).str().find("matmul TF32: on") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(each_guard_kind_recompiles_once_with_its_reason) {
  auto f = make_f();
  Tensor x = ones({2, 3}), w = ones({3, 4});
  f(x, w);
  f(ones({5, 3}), w);  // size
  f(x, ones({3, 4}, DType::f64).to(DType::bf16));  // dtype
  f(ones({1, 2, 3}), w);  // rank
  f(ones({3, 2}).t(), w);  // stride class
  Tensor wg = ones({3, 4});
  wg.requires_grad_();
  f(x, wg);  // requires_grad
  auto reasons = f.core().recompile_reasons();
  std::vector<std::string> expected = {
      "tensor 'x' size mismatch at index 0: expected 2, actual 5",
      "tensor 'w' dtype mismatch: expected f32, actual bf16",
      "tensor 'x' rank mismatch: expected 2, actual 3",
      "tensor 'x' stride mismatch: expected contiguous, actual transposed",
      "tensor 'w' requires_grad mismatch: expected false, actual true",
  };
  BOOST_TEST(reasons == expected, boost::test_tools::per_element());
  // Every variant now hits its own entry.
  f(ones({5, 3}), w);
  f(ones({3, 2}).t(), w);
  BOOST_TEST(f.core().num_entries() == 6u);
}

BOOST_AUTO_TEST_CASE(unnamed_arguments_are_arg0_arg1) {
  jit::CompileOptions o;
  o.dynamic = jit::DynamicMode::never;
  auto f = jit::compile([](const Tensor& a, const Tensor& b) { return a + b; }, o);
  f(ones({2}), ones({2}));
  f(ones({2}), ones({2}, DType::f64));
  BOOST_TEST(f.core().recompile_reasons().at(0) == "tensor 'arg1' dtype mismatch: expected f32, actual f64");
}

BOOST_AUTO_TEST_CASE(recompile_limit_falls_back_to_eager_with_one_warning) {
  jit::CompileOptions o = named();
  o.recompile_limit = 2;
  auto f = jit::compile([](const Tensor& x, const Tensor& w) { return x * w; }, o);
  Tensor w = tensor({2});
  std::string err = capture_stderr([&] {
    for (int n = 1; n <= 5; ++n) {
      Tensor x = ones({n + 1});
      BOOST_TEST(f(x, w).to_vector<float>() == std::vector<float>(n + 1, 2.0f));
    }
  });
  BOOST_TEST(f.core().num_entries() == 2u);
  BOOST_TEST(f.core().stats().eager_calls == 3);
  BOOST_TEST(err.find("'f' reached its recompile limit (2 entries)") != std::string::npos, err);
  BOOST_TEST(err.find("last reason: tensor 'x' size mismatch at index 0: expected 3, actual 4") !=
                 std::string::npos, err);
  // Warned once, not per call.
  BOOST_TEST(err.find("recompile limit") == err.rfind("recompile limit"));
}

BOOST_AUTO_TEST_CASE(recompile_limit_can_be_an_error) {
  jit::CompileOptions o = named();
  o.recompile_limit = 1;
  o.error_on_recompile_limit = true;
  auto f = jit::compile([](const Tensor& x, const Tensor& w) { return x * w; }, o);
  f(ones({2}), ones({2}));
  BOOST_CHECK_EXCEPTION(f(ones({2}, DType::f64), ones({2})), Error, [](const Error& e) {
    return std::string(e.what()).find("tensor 'x' dtype mismatch: expected f32, actual f64") !=
           std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(error_on_recompile_rejects_any_retrace) {
  jit::CompileOptions o = named();
  o.error_on_recompile = true;
  auto f = jit::compile([](const Tensor& x, const Tensor& w) { return x - w; }, o);
  f(ones({2}), ones({2}));
  f(ones({2}), ones({2}));
  BOOST_CHECK_EXCEPTION(f(ones({3}), ones({3})), Error, [](const Error& e) {
    return std::string(e.what()).find("would recompile") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(kiln_log_reports_recompiles_guards_and_graphs) {
  setenv("KILN_LOG", "recompiles,guards,graph", 1);
  reload_log_settings();
  std::string err = capture_stderr([] {
    auto f = make_f();
    f(ones({2, 3}), ones({3, 4}));
    f(ones({2, 3}, DType::f64), ones({3, 4}, DType::f64));
  });
  unsetenv("KILN_LOG");
  reload_log_settings();
  BOOST_TEST(err.find("kiln: recompiling 'f' (entry 1): tensor 'x' dtype mismatch: expected f32, "
                      "actual f64") != std::string::npos, err);
  BOOST_TEST(err.find("kiln: guards of 'f' entry 0:") != std::string::npos);
  BOOST_TEST(err.find("tensor 'w': device=cpu dtype=f64 sizes=[3, 4]") != std::string::npos);
  BOOST_TEST(err.find("= matmul(%0, %1)") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(explain_and_dot_describe_every_entry) {
  auto f = make_f();
  f(ones({2, 3}), ones({3, 4}));
  f(ones({2, 3}), ones({3, 4}));
  std::string text = f.explain();
  BOOST_TEST(text.find("compiled function 'f': 2 calls, 1 hits, 1 compiles") != std::string::npos,
             text);
  BOOST_TEST(text.find("traced because: first call") != std::string::npos);
  std::string dot = f.graph_dot();
  BOOST_TEST(dot.rfind("digraph \"f\"", 0) == 0u);
  BOOST_TEST(dot.find("matmul") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(dump_dir_receives_one_dot_file_per_entry) {
  char dir[] = "/tmp/kiln_dump_XXXXXX";
  BOOST_REQUIRE(mkdtemp(dir) != nullptr);
  setenv("KILN_DUMP_DIR", dir, 1);
  auto f = make_f();
  f(ones({2, 3}), ones({3, 4}));
  f(ones({4, 3}), ones({3, 4}));
  unsetenv("KILN_DUMP_DIR");
  for (int i = 0; i < 2; ++i) {
    std::ifstream in(std::string(dir) + "/f." + std::to_string(i) + ".dot");
    std::stringstream ss;
    ss << in.rdbuf();
    BOOST_TEST(ss.str().find("digraph") != std::string::npos);
  }
  std::filesystem::remove_all(dir);  // with the graph after each pass (test_pass_pipeline)
}

BOOST_AUTO_TEST_CASE(lookup_finds_entries_without_running) {
  int runs = 0;
  auto f = jit::compile([&](const Tensor& x) { ++runs; return x + 1.0; });
  BOOST_TEST(f.lookup(ones({2})) == -1);
  f(ones({2}));
  int traced_runs = runs;
  BOOST_TEST(f.lookup(ones({2})) == 0);
  BOOST_TEST(f.lookup(ones({2}, DType::f64)) == -1);
  f(ones({2}));
  BOOST_TEST(runs == traced_runs);  // a hit does not call the C++ function
}

BOOST_AUTO_TEST_SUITE_END()
