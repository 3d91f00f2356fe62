// Graph edits that keep producers exact (see rewrite.h).
#include "graph/rewrite.h"

#include <fmt/format.h>

#include "graph/sym_shapes.h"
#include "runtime/error.h"

namespace kiln::graph {

Readers::Readers(const Graph& g)
    : start_(g.values.size() + 1, 0), returned_(g.values.size(), false) {
  // Counting sort by value: counts, prefix sums, then fill in node order.
  for (const Node& n : g.nodes)
    for (int v : n.inputs) ++start_[v + 1];
  for (std::size_t v = 0; v < g.values.size(); ++v) start_[v + 1] += start_[v];
  readers_.resize(start_.back());
  std::vector<int> next(start_.begin(), start_.end() - 1);
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (int v : g.nodes[i].inputs) readers_[next[v]++] = static_cast<int>(i);
  for (int v : g.outputs) returned_[v] = true;
}

std::span<const int> Readers::nodes(int value) const {
  return std::span<const int>(readers_).subspan(start_[value], start_[value + 1] - start_[value]);
}

int Readers::sole_reader(int value) const {
  auto r = nodes(value);
  return r.size() == 1 && !returned_[value] ? r[0] : -1;
}

const Node* producer_of(const Graph& g, int value) {
  int p = g.values[value].producer;
  return p >= 0 ? &g.nodes[p] : nullptr;
}

int replace_all_uses(Graph& g, int from, int to) {
  int uses = 0;
  for (auto& n : g.nodes)
    for (auto& v : n.inputs)
      if (v == from) v = to, ++uses;
  for (auto& v : g.outputs)
    if (v == from) v = to, ++uses;
  return uses;
}

namespace {

// Producers from node `first` on, after the node list moved.
void renumber_from(Graph& g, std::size_t first) {
  for (std::size_t i = first; i < g.nodes.size(); ++i)
    for (int v : g.nodes[i].outputs) g.values[v].producer = static_cast<int>(i);
}

}  // namespace

int insert_before(Graph& g, int at, Node node, std::vector<Value> outputs) {
  KILN_CHECK(at >= 0 && at <= static_cast<int>(g.nodes.size()),
             "rewrite: cannot insert {} before node {}: graph '{}' has {} nodes", node.op, at,
             g.name, g.nodes.size());
  for (int v : node.inputs) {
    KILN_CHECK(v >= 0 && v < static_cast<int>(g.values.size()),
               "rewrite: {} inserted before node {} reads %{}, not a value of graph '{}'", node.op,
               at, v, g.name);
    int p = g.values[v].producer;
    KILN_CHECK(p < at, "rewrite: {} inserted before node {} reads %{} ({}), made later by node {}",
               node.op, at, v, shape_str(g.values[v].meta.shape), p);
  }
  node.outputs.clear();
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    outputs[k].producer = at;
    outputs[k].output_index = static_cast<int>(k);
    g.values.push_back(std::move(outputs[k]));
    node.outputs.push_back(static_cast<int>(g.values.size()) - 1);
  }
  g.nodes.insert(g.nodes.begin() + at, std::move(node));
  renumber_from(g, at);
  return at;
}

int insert_op_before(Graph& g, int at, OpId op, std::vector<int> inputs, const OpAttrs& attrs,
                     const Node& like) {
  std::vector<TensorMeta> metas;
  std::vector<SizeExprs> sizes;
  for (int v : inputs) {
    metas.push_back(g.values[v].meta);
    sizes.push_back(g.values[v].sizes);
  }
  std::vector<TensorMeta> outs = infer_meta(op, metas, attrs);
  std::vector<SizeExprs> out_sizes = infer_size_exprs(op, sizes, metas, attrs, outs);
  Node node;
  node.op = op;
  node.attrs = attrs;
  node.grad = like.grad;
  node.checkpoint = like.checkpoint;
  std::vector<Value> values(outs.size());
  for (std::size_t k = 0; k < outs.size(); ++k) {
    values[k].meta = outs[k];
    values[k].sizes = out_sizes[k];
    values[k].device = g.values[like.output()].device;
    values[k].strides = output_strides(op, attrs, g.values[inputs.at(0)].strides);
  }
  node.inputs = std::move(inputs);
  return insert_before(g, at, std::move(node), std::move(values));
}

void erase_nodes(Graph& g, std::span<const int> indices) {
  std::vector<bool> erased(g.nodes.size(), false);
  for (int i : indices) {
    KILN_CHECK(i >= 0 && i < static_cast<int>(g.nodes.size()),
               "rewrite: cannot erase node {}: graph '{}' has {} nodes", i, g.name, g.nodes.size());
    erased[i] = true;
  }
  // A value an erased node made and no other node took over (rebind_output) goes with it.
  std::vector<bool> gone(g.values.size(), false);
  for (int i : indices)
    for (int v : g.nodes[i].outputs) gone[v] = g.values[v].producer == i;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (int v : g.nodes[i].inputs)
      KILN_CHECK(
          erased[i] || !gone[v],
          "rewrite: cannot erase the {} making %{} ({}) in graph '{}': node {} ({}) reads it",
          g.nodes[g.values[v].producer].op, v, shape_str(g.values[v].meta.shape), g.name, i,
          g.nodes[i].op);
  for (int v : g.outputs)
    KILN_CHECK(!gone[v], "rewrite: cannot erase the {} making %{} ({}): graph '{}' returns it",
               g.nodes[g.values[v].producer].op, v, shape_str(g.values[v].meta.shape), g.name);
  std::size_t kept = 0;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    if (erased[i]) continue;
    if (kept != i) g.nodes[kept] = std::move(g.nodes[i]);  // a self-move would empty the node
    ++kept;
  }
  g.nodes.resize(kept);
  // Every value is renumbered, not just those after the first erased node: a value a node
  // stopped making (rebind_output) or an erased node made names no producer either.
  for (auto& v : g.values) v.producer = -1;
  renumber_from(g, 0);
}

void rebind_output(Graph& g, int node, int k, int value) {
  Node& n = g.nodes.at(node);
  KILN_CHECK(!g.input_of(value),
             "rewrite: %{} cannot become output {} of the {} at node {}: it is a graph input",
             value, k, n.op, node);
  g.values[n.outputs.at(k)].producer = -1;
  n.outputs[k] = value;
  g.values[value].producer = node;
  g.values[value].output_index = k;
}

}  // namespace kiln::graph
