// The graph-rewrite API (graph/rewrite.h, graph/pattern.h) on small graphs built by hand:
// readers, replacing uses, inserting and erasing nodes with producers kept exact, patterns and
// the fixed-point rule driver.
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "graph/pattern.h"
#include "graph/rewrite.h"
#include "runtime/error.h"
#include "runtime/factories.h"

using namespace kiln;
using graph::Graph;
using graph::Node;

namespace {

int argument(Graph& g, const std::string& name, Shape shape) {
  graph::Input in;
  in.kind = graph::InputKind::argument;
  in.arg_index = static_cast<int>(g.inputs.size());
  in.name = name;
  return g.add_input(std::move(in), TensorMeta{std::move(shape), DType::f32});
}

// Appends a node of `op` reading `inputs`; returns its (first) value.
int add(Graph& g, OpId op, std::vector<int> inputs, OpAttrs attrs = {}) {
  std::vector<TensorMeta> metas;
  for (int v : inputs) metas.push_back(g.values[v].meta);
  std::vector<TensorMeta> outs = infer_meta(op, metas, attrs);
  Node n;
  n.op = op;
  n.attrs = attrs;
  n.inputs = std::move(inputs);
  return g.nodes[g.add_node(std::move(n), outs)].output();
}

std::vector<OpId> ops(const Graph& g) {
  std::vector<OpId> out;
  for (const auto& n : g.nodes) out.push_back(n.op);
  return out;
}

// Every node's values name it as their producer, at their position in its outputs.
void check_producers(const Graph& g) {
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (std::size_t k = 0; k < g.nodes[i].outputs.size(); ++k) {
      const graph::Value& v = g.values[g.nodes[i].outputs[k]];
      BOOST_TEST(v.producer == static_cast<int>(i));
      BOOST_TEST(v.output_index == static_cast<int>(k));
    }
}

std::vector<int> list(std::span<const int> s) {
  return {s.begin(), s.end()};
}

using Ops = std::vector<OpId>;
using Ints = std::vector<int>;

}  // namespace

BOOST_AUTO_TEST_SUITE(graph_rewrite)

BOOST_AUTO_TEST_CASE(readers_list_each_operand_and_outputs) {
  Graph g;
  int x = argument(g, "x", {4});
  int a = add(g, OpId::exp, {x});     // node 0
  int b = add(g, OpId::add, {a, a});  // node 1: reads a twice
  int c = add(g, OpId::mul, {x, b});  // node 2
  int d = add(g, OpId::neg, {c});     // node 3
  int e = add(g, OpId::sin, {x});     // node 4: read by nothing
  g.outputs = {b, d};
  graph::Readers r(g);
  BOOST_TEST(list(r.nodes(x)) == (Ints{0, 2, 4}));
  BOOST_TEST(list(r.nodes(a)) == (Ints{1, 1}));
  BOOST_TEST(list(r.nodes(b)) == (Ints{2}));
  BOOST_TEST(r.returned(b));
  BOOST_TEST(!r.returned(c));
  BOOST_TEST(r.sole_reader(c) == 3);
  BOOST_TEST(r.sole_reader(b) == -1);  // also returned
  BOOST_TEST(r.sole_reader(a) == -1);  // two operands of one node
  BOOST_TEST(r.sole_reader(x) == -1);
  BOOST_TEST(r.unread(e));
  BOOST_TEST(!r.unread(d));  // returned
  BOOST_TEST(graph::producer_of(g, x) == nullptr);
  BOOST_TEST(graph::producer_of(g, c) == &g.nodes[2]);
}

BOOST_AUTO_TEST_CASE(replace_all_uses_moves_operands_and_outputs) {
  Graph g;
  int x = argument(g, "x", {4});
  int y = argument(g, "y", {4});
  int a = add(g, OpId::exp, {x});
  int b = add(g, OpId::add, {a, a});
  g.outputs = {a, b};
  BOOST_TEST(graph::replace_all_uses(g, a, y) == 3);
  BOOST_TEST(g.nodes[1].inputs == (Ints{y, y}));
  BOOST_TEST(g.outputs == (Ints{y, b}));
  BOOST_TEST(graph::replace_all_uses(g, a, y) == 0);
  BOOST_TEST(graph::Readers(g).unread(a));
}

BOOST_AUTO_TEST_CASE(insert_before_keeps_topological_order_and_producers) {
  Graph g;
  int x = argument(g, "x", {2, 3});
  int a = add(g, OpId::exp, {x});  // node 0
  int b = add(g, OpId::neg, {a});  // node 1
  int c = add(g, OpId::cos, {b});  // node 2
  g.outputs = {c};
  std::size_t values = g.values.size();
  Node sin;
  sin.op = OpId::sin;
  sin.inputs = {a};
  graph::Value s = g.values[a];
  int at = graph::insert_before(g, 1, sin, {s});
  BOOST_TEST(at == 1);
  BOOST_TEST(ops(g) == (Ops{OpId::exp, OpId::sin, OpId::neg, OpId::cos}));
  int new_value = g.nodes[1].output();
  BOOST_TEST(new_value == static_cast<int>(values));  // a fresh id; old ids stay
  BOOST_TEST(g.values[new_value].producer == 1);
  BOOST_TEST(g.values[b].producer == 2);
  BOOST_TEST(g.values[c].producer == 3);
  check_producers(g);
  // At the end, and with outputs from the op's rules: a transpose of a contiguous [2, 3].
  OpAttrs t;
  t.dims = {1, 0};
  int p = graph::insert_op_before(g, 4, OpId::permute, {c}, t, g.nodes[3]);
  BOOST_TEST(p == 4);
  const graph::Value& pv = g.values[g.nodes[4].output()];
  BOOST_TEST(pv.meta.shape == (Shape{3, 2}));
  BOOST_TEST((pv.strides == StrideClass::transposed));
  BOOST_TEST(pv.sizes.size() == 2u);
  BOOST_TEST(pv.sizes[0].is_constant());
  check_producers(g);
}

BOOST_AUTO_TEST_CASE(insert_before_refuses_an_operand_made_later) {
  Graph g;
  int x = argument(g, "x", {4});
  add(g, OpId::exp, {x});
  int b = add(g, OpId::neg, {x});  // node 1
  Node bad;
  bad.op = OpId::sin;
  bad.inputs = {b};
  try {
    graph::insert_before(g, 1, bad, {g.values[b]});
    BOOST_FAIL("inserted a node before its operand's producer");
  } catch (const Error& e) {
    std::string what = e.what();
    BOOST_TEST(what.find("sin") != std::string::npos, what);
    BOOST_TEST(what.find("[4]") != std::string::npos, what);
  }
  BOOST_TEST(g.nodes.size() == 2u);
}

BOOST_AUTO_TEST_CASE(erase_renumbers_producers) {
  Graph g;
  int x = argument(g, "x", {4});
  int a = add(g, OpId::exp, {x});  // node 0, unread
  int b = add(g, OpId::sin, {x});  // node 1
  int c = add(g, OpId::neg, {b});  // node 2
  int d = add(g, OpId::cos, {x});  // node 3, unread
  g.outputs = {c};
  std::vector<int> gone{3, 0};
  graph::erase_nodes(g, gone);
  BOOST_TEST(ops(g) == (Ops{OpId::sin, OpId::neg}));
  BOOST_TEST(g.values[a].producer == -1);
  BOOST_TEST(g.values[d].producer == -1);
  BOOST_TEST(g.values[b].producer == 0);
  BOOST_TEST(g.values[c].producer == 1);
  check_producers(g);
  // Still read (by neg), or returned: an Error naming the op, and the graph as it was.
  std::vector<int> sin{0}, neg{1};
  BOOST_CHECK_THROW(graph::erase_nodes(g, sin), Error);
  BOOST_CHECK_THROW(graph::erase_nodes(g, neg), Error);
  try {
    graph::erase_nodes(g, sin);
  } catch (const Error& e) {
    BOOST_TEST(std::string(e.what()).find("sin") != std::string::npos, e.what());
  }
  BOOST_TEST(g.nodes.size() == 2u);
  // Erasing a node with its reader is fine.
  std::vector<int> both{1, 0};
  g.outputs = {x};
  graph::erase_nodes(g, both);
  BOOST_TEST(g.nodes.empty());
  BOOST_TEST(g.values[b].producer == -1);
}

BOOST_AUTO_TEST_CASE(rebind_output_lets_a_node_take_another_nodes_value) {
  Graph g;
  int x = argument(g, "x", {4});
  int a = add(g, OpId::exp, {x});  // node 0
  int b = add(g, OpId::neg, {a});  // node 1, to be replaced by node 0
  int c = add(g, OpId::sin, {b});  // node 2
  g.outputs = {c};
  graph::rebind_output(g, 0, 0, b);
  BOOST_TEST(g.values[a].producer == -1);
  BOOST_TEST(g.values[b].producer == 0);
  std::vector<int> neg{1};
  g.nodes[1].inputs = {x};  // it read the value its replacement no longer makes
  graph::erase_nodes(g, neg);
  BOOST_TEST(ops(g) == (Ops{OpId::exp, OpId::sin}));
  BOOST_TEST(g.nodes[0].outputs == (Ints{b}));
  BOOST_TEST(g.nodes[1].inputs == (Ints{b}));
  check_producers(g);
  BOOST_CHECK_THROW(graph::rebind_output(g, 0, 0, x), Error);  // a graph input
}

BOOST_AUTO_TEST_CASE(patterns_match_ops_predicates_and_operands) {
  Graph g;
  int x = argument(g, "x", {4});
  int y = argument(g, "y", {4});
  int e = add(g, OpId::exp, {x});
  add(g, OpId::add, {e, y});  // node 1
  add(g, OpId::add, {y, e});  // node 2
  graph::Pattern add_of_exp{OpId::add, nullptr, {graph::Pattern{OpId::exp, nullptr, {}}}};
  BOOST_TEST(graph::matches(g, g.nodes[1], add_of_exp));
  BOOST_TEST(!graph::matches(g, g.nodes[2], add_of_exp));  // operand 0 is an input
  BOOST_TEST(!graph::matches(g, g.nodes[0], add_of_exp));  // another op
  graph::Pattern any_reading_y{
      std::nullopt, [y](const Graph&, const Node& n) { return n.inputs.back() == y; }, {}};
  BOOST_TEST(graph::matches(g, g.nodes[1], any_reading_y));
  BOOST_TEST(!graph::matches(g, g.nodes[2], any_reading_y));
}

// An exp read by a sin becomes a sin: each rewrite enables one on the node before it, which
// the next sweep finds.
graph::Rule exp_before_sin() {
  graph::Pattern p{OpId::exp,
                   [](const Graph& g, const Node& n) {
                     for (const auto& m : g.nodes)
                       for (int v : m.inputs)
                         if (v == n.output() && m.op == OpId::sin) return true;
                     return false;
                   },
                   {}};
  return graph::Rule{"exp_before_sin", p, [](Graph& g, int i) {
                       g.nodes[i].op = OpId::sin;
                       return true;
                     }};
}

BOOST_AUTO_TEST_CASE(the_driver_sweeps_to_a_fixed_point) {
  auto build = [] {
    Graph g;
    int x = argument(g, "x", {4});
    int a = add(g, OpId::exp, {x});
    int b = add(g, OpId::exp, {a});
    int c = add(g, OpId::exp, {b});
    g.outputs = {add(g, OpId::sin, {c})};
    return g;
  };
  std::vector<graph::Rule> rules{exp_before_sin()};
  Graph once = build();
  BOOST_TEST(graph::rewrite_to_fixed_point(once, rules, 1) == 1);
  BOOST_TEST(ops(once) == (Ops{OpId::exp, OpId::exp, OpId::sin, OpId::sin}));
  Graph fixed = build();
  BOOST_TEST(graph::rewrite_to_fixed_point(fixed, rules) == 3);
  BOOST_TEST(ops(fixed) == (Ops{OpId::sin, OpId::sin, OpId::sin, OpId::sin}));
  BOOST_TEST(graph::rewrite_to_fixed_point(fixed, rules) == 0);
}

BOOST_AUTO_TEST_CASE(replace_by_rules_point_uses_at_the_same_value) {
  // neg(neg(x)) is x: rewritten where the pattern matches, through any depth of negations.
  Graph g;
  int x = argument(g, "x", {4});
  int v = x;
  for (int i = 0; i < 5; ++i) v = add(g, OpId::neg, {v});
  g.outputs = {v};
  std::vector<graph::Rule> rules{graph::replace_by(
      "neg_neg", graph::Pattern{OpId::neg, nullptr, {graph::Pattern{OpId::neg, nullptr, {}}}},
      [](const Graph& g, const Node& n) {
        return g.nodes[g.values[n.inputs[0]].producer].inputs[0];
      })};
  BOOST_TEST(graph::rewrite_to_fixed_point(g, rules) == 2);
  // Five negations are one: the last reads x (the second and fourth pointed their readers at
  // x, and neither reader was then a neg of a neg).
  BOOST_TEST(g.outputs == (Ints{v}));
  BOOST_TEST(g.nodes[4].inputs == (Ints{x}));
  BOOST_TEST(g.nodes[2].inputs == (Ints{x}));
  BOOST_TEST(g.nodes.size() == 5u);  // dead nodes stay until dead-code elimination
}

BOOST_AUTO_TEST_SUITE_END()
