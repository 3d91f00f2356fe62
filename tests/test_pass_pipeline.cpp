// The pass pipeline (graph/pipeline.h): the table's order and pipelines, each pass on
// KILN_LOG=passes with node counts before and after, and the graph after each pass in
// KILN_DUMP_DIR.
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "graph/pipeline.h"
#include "jit/compile.h"
#include "runtime/log.h"
#include "support/autograd_leaves.h"
#include "support/capture_output.h"
#include "support/scoped_env.h"
#include "support/temp_dir.h"

using namespace kiln;
using graph::Graph;
using graph::Pipeline;

namespace {

using Names = std::vector<std::string>;

Names names(Pipeline p) {
  Names out;
  for (const auto* pass : graph::pipeline_passes(p)) out.emplace_back(pass->name);
  return out;
}

int argument(Graph& g, const std::string& name, Shape shape) {
  graph::Input in;
  in.kind = graph::InputKind::argument;
  in.arg_index = static_cast<int>(g.inputs.size());
  in.name = name;
  return g.add_input(std::move(in), TensorMeta{std::move(shape), DType::f32});
}

int add(Graph& g, OpId op, std::vector<int> inputs, OpAttrs attrs = {}) {
  std::vector<TensorMeta> metas;
  for (int v : inputs) metas.push_back(g.values[v].meta);
  graph::Node n;
  n.op = op;
  n.attrs = attrs;
  n.inputs = std::move(inputs);
  return g.nodes[g.add_node(std::move(n), infer_meta(op, metas, attrs))].output();
}

// exp(x), neg of it twice, and a sin nothing reads: one node once simplified.
Graph double_negation() {
  Graph g;
  g.name = "hand";
  int x = argument(g, "x", {4});
  int a = add(g, OpId::exp, {x});
  int b = add(g, OpId::neg, {a});
  int c = add(g, OpId::neg, {b});
  add(g, OpId::sin, {x});
  g.outputs = {c};
  return g;
}

Names lines_of(const std::string& text) {
  Names out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("kiln: passes:", 0) == 0) out.push_back(line);
  return out;
}

// The stderr lines of KILN_LOG=passes while `body` runs.
template <typename Body>
Names pass_log(Body body) {
  std::string err;
  {
    test::ScopedEnv env("KILN_LOG", "passes");
    reload_log_settings();
    err = test::capture_output(2, body);
  }
  reload_log_settings();
  return lines_of(err);
}

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::set<std::string> files_in(const std::filesystem::path& dir) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    out.insert(e.path().filename().string());
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(pass_pipeline)

BOOST_AUTO_TEST_CASE(the_table_lists_every_pass_in_order) {
  Names all;
  for (const auto& pass : graph::pass_table()) all.emplace_back(pass.name);
  BOOST_TEST(all ==
             (Names{"dead_code", "simplify", "pads_to_cat", "cat_before_reshape", "fold_constants",
                    "common_subexpressions", "attention", "transpose_matmul_results"}));
  BOOST_TEST(names(Pipeline::trace) ==
             (Names{"simplify", "pads_to_cat", "cat_before_reshape", "fold_constants",
                    "common_subexpressions", "attention"}));
  BOOST_TEST(names(Pipeline::joint) == (Names{"simplify", "pads_to_cat", "cat_before_reshape",
                                              "fold_constants", "common_subexpressions"}));
  BOOST_TEST(names(Pipeline::forward) == (Names{"dead_code"}));
  BOOST_TEST(names(Pipeline::backward) == (Names{"dead_code", "transpose_matmul_results"}));
  for (const auto& pass : graph::pass_table()) {
    bool inexact = pass.name == "attention" || pass.name == "transpose_matmul_results";
    BOOST_TEST(pass.exact == !inexact, pass.name);
    BOOST_TEST(pass.fixed_point == (pass.name != "dead_code" && !inexact), pass.name);
    BOOST_TEST((pass.gate != nullptr) == (pass.name == "attention"), pass.name);
  }
  BOOST_TEST(std::string(graph::pipeline_passes(Pipeline::trace).back()->gate) ==
             "KILN_ATTENTION_REWRITE");
}

BOOST_AUTO_TEST_CASE(each_pass_is_logged_with_node_counts) {
  test::ScopedEnv on("KILN_ATTENTION_REWRITE", "1");
  Graph g = double_negation();
  Names log = pass_log([&] { graph::run_pipeline(g, Pipeline::trace); });
  // Round 1 removes three nodes, so the exact passes run a second round, which changes nothing.
  Names want{
      "kiln: passes: 'hand' trace 01 simplify (round 1): 4 -> 1 nodes",
      "kiln: passes: 'hand' trace 02 pads_to_cat (round 1): 1 -> 1 nodes",
      "kiln: passes: 'hand' trace 03 cat_before_reshape (round 1): 1 -> 1 nodes",
      "kiln: passes: 'hand' trace 04 fold_constants (round 1): 1 -> 1 nodes",
      "kiln: passes: 'hand' trace 05 common_subexpressions (round 1): 1 -> 1 nodes",
      "kiln: passes: 'hand' trace 06 simplify (round 2): 1 -> 1 nodes",
      "kiln: passes: 'hand' trace 07 pads_to_cat (round 2): 1 -> 1 nodes",
      "kiln: passes: 'hand' trace 08 cat_before_reshape (round 2): 1 -> 1 nodes",
      "kiln: passes: 'hand' trace 09 fold_constants (round 2): 1 -> 1 nodes",
      "kiln: passes: 'hand' trace 10 common_subexpressions (round 2): 1 -> 1 nodes",
      "kiln: passes: 'hand' trace 11 attention: 1 -> 1 nodes",
  };
  BOOST_TEST(log == want, boost::test_tools::per_element());
  BOOST_TEST(g.nodes.size() == 1u);
  BOOST_TEST(g.outputs[0] == g.nodes[0].output());
}

BOOST_AUTO_TEST_CASE(a_gated_pass_says_it_is_off) {
  test::ScopedEnv off("KILN_ATTENTION_REWRITE", "0");
  Graph g = double_negation();
  Names log = pass_log([&] { graph::run_pipeline(g, Pipeline::trace); });
  BOOST_TEST_REQUIRE(log.size() == 11u);
  BOOST_TEST(log.back() ==
             "kiln: passes: 'hand' trace 11 attention: off (KILN_ATTENTION_REWRITE=0)");
}

BOOST_AUTO_TEST_CASE(the_backward_pipeline_transposes_a_matmul_result) {
  Graph g;
  g.name = "bwd";
  int x = argument(g, "x", {3, 5});
  int w = argument(g, "w", {5, 4});
  int m = add(g, OpId::matmul, {x, w});
  OpAttrs t;
  t.dims = {1, 0};
  add(g, OpId::exp, {m});  // dead
  int r = add(g, OpId::permute, {m}, t);
  g.outputs = {r};
  Names log = pass_log([&] { graph::run_pipeline(g, Pipeline::backward); });
  BOOST_TEST(
      log == (Names{"kiln: passes: 'bwd' backward 01 dead_code: 3 -> 2 nodes",
                    "kiln: passes: 'bwd' backward 02 transpose_matmul_results: 2 -> 3 nodes"}),
      boost::test_tools::per_element());
  BOOST_TEST_REQUIRE(g.nodes.size() == 3u);
  BOOST_TEST((g.nodes[0].op == OpId::permute && g.nodes[0].inputs[0] == w));
  BOOST_TEST((g.nodes[1].op == OpId::permute && g.nodes[1].inputs[0] == x));
  BOOST_TEST((g.nodes[2].op == OpId::matmul));
  BOOST_TEST(g.nodes[2].output() == r);  // the product took over the permute's value
  BOOST_TEST(g.values[r].producer == 2);
  BOOST_TEST(g.values[m].producer == -1);
  BOOST_TEST(g.values[r].meta.shape == (Shape{4, 3}));
}

BOOST_AUTO_TEST_CASE(the_dump_dir_gets_the_graph_after_each_pass) {
  test::TempDir dir;
  test::ScopedEnv dump("KILN_DUMP_DIR", dir.path().c_str());
  test::ScopedEnv on("KILN_ATTENTION_REWRITE", "1");
  {
    // No scope: nothing is written.
    Graph g = double_negation();
    graph::run_pipeline(g, Pipeline::trace);
    BOOST_TEST(files_in(dir.path()).empty());
  }
  jit::CompileOptions options;
  options.name = "dumped";
  auto f = jit::compile([](const Tensor& x) { return exp(x); }, options);
  f(tensor({1, 2, 3}));
  // One exp: one round leaves it as it is, and the attention rewrite finds nothing.
  std::set<std::string> want{"dumped.0.dot",
                             "dumped.0.trace.00-input.txt",
                             "dumped.0.trace.01-simplify.txt",
                             "dumped.0.trace.02-pads_to_cat.txt",
                             "dumped.0.trace.03-cat_before_reshape.txt",
                             "dumped.0.trace.04-fold_constants.txt",
                             "dumped.0.trace.05-common_subexpressions.txt",
                             "dumped.0.trace.06-attention.txt"};
  BOOST_TEST(files_in(dir.path()) == want, boost::test_tools::per_element());
  const Graph& g = f.core().graph(0);
  BOOST_TEST(read(dir / "dumped.0.trace.06-attention.txt") == g.str());
  BOOST_TEST(read(dir / "dumped.0.trace.00-input.txt").find("exp(") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_function_compiled_for_training_dumps_its_joint_graph_too) {
  test::TempDir dir;
  test::ScopedEnv dump("KILN_DUMP_DIR", dir.path().c_str());
  jit::CompileOptions options;
  options.name = "trained";
  auto f = jit::compile([](const Tensor& x) { return sum(exp(x) * 2.0); }, options);
  Tensor x = test::leaf(tensor({1, 2, 3}), DType::f32, Device::cuda());
  f(x);
  BOOST_TEST_REQUIRE(f.core().aot(0) != nullptr);
  std::set<std::string> files = files_in(dir.path());
  for (const char* name :
       {"trained.0.dot", "trained.0.trace.00-input.txt", "trained.0.trace.01-simplify.txt",
        "trained.0.joint.00-input.txt", "trained.0.joint.01-simplify.txt"})
    BOOST_TEST(files.count(name) == 1u, name);
  for (const auto& name : files) BOOST_TEST(name.rfind("trained.0.", 0) == 0u, name);
}

BOOST_AUTO_TEST_CASE(a_compiled_function_logs_its_trace_pipeline) {
  jit::CompileOptions options;
  options.name = "logged";
  auto f = jit::compile([](const Tensor& x) { return neg(neg(x)) + 1.0; }, options);
  Tensor x = tensor({1, 2});
  Names log = pass_log([&] { f(x); });
  BOOST_TEST_REQUIRE(!log.empty());
  BOOST_TEST(log.front().rfind("kiln: passes: 'logged' trace 01 simplify (round 1): ", 0) == 0,
             log.front());
  for (const auto& n : f.core().graph(0).nodes) BOOST_TEST((n.op != OpId::neg));
  BOOST_TEST(f(x).to_vector<float>() == (std::vector<float>{2, 3}));
}

BOOST_AUTO_TEST_SUITE_END()
