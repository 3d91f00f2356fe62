// Extracting subgraphs with renumbered values.
#include "graph/subgraph.h"

#include "runtime/error.h"

namespace kiln::graph {

Graph subgraph(const Graph& g, const SubgraphInputs& inputs, std::span<const int> nodes,
               std::span<const int> outputs) {
  Graph out;
  out.name = g.name;
  out.symbols = g.symbols;
  std::vector<int> renamed(g.values.size(), -1);
  auto copy_value_facts = [&](int from, int to) {
    out.values[to].sizes = g.values[from].sizes;
    out.values[to].device = g.values[from].device;
    out.values[to].strides = g.values[from].strides;
    renamed[from] = to;
  };
  for (const auto& [value, input] : inputs)
    copy_value_facts(value, out.add_input(input, g.values[value].meta));
  auto lookup = [&](int value) {
    KILN_CHECK(renamed[value] >= 0,
               "compile: internal error: a subgraph of '{}' reads %{}, which none of its nodes "
               "or inputs provides",
               g.name, value);
    return renamed[value];
  };
  for (int index : nodes) {
    const Node& n = g.nodes[index];
    Node copy = n;
    for (int& v : copy.inputs) v = lookup(v);
    std::vector<TensorMeta> metas;
    for (int v : n.outputs) metas.push_back(g.values[v].meta);
    int added = out.add_node(std::move(copy), metas);
    for (std::size_t k = 0; k < n.outputs.size(); ++k)
      copy_value_facts(n.outputs[k], out.nodes[added].outputs[k]);
  }
  for (int v : outputs) out.outputs.push_back(lookup(v));
  return out;
}

std::vector<bool> nodes_feeding(const Graph& g, std::span<const int> values) {
  std::vector<bool> feeds(g.nodes.size(), false), seen(g.values.size(), false);
  std::vector<int> stack(values.begin(), values.end());
  while (!stack.empty()) {
    int v = stack.back();
    stack.pop_back();
    if (seen[v]) continue;
    seen[v] = true;
    int p = g.values[v].producer;
    if (p < 0) continue;
    feeds[p] = true;
    for (int u : g.nodes[p].inputs) stack.push_back(u);
  }
  return feeds;
}

}  // namespace kiln::graph
