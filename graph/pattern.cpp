// Pattern matching and the fixed-point rule driver (see pattern.h).
#include "graph/pattern.h"

#include "graph/rewrite.h"

namespace kiln::graph {

bool matches(const Graph& g, const Node& n, const Pattern& p) {
  if (p.op && n.op != *p.op) return false;
  if (p.operands.size() > n.inputs.size()) return false;
  for (std::size_t i = 0; i < p.operands.size(); ++i) {
    const Node* operand = producer_of(g, n.inputs[i]);
    if (!operand || !matches(g, *operand, p.operands[i])) return false;
  }
  return !p.when || p.when(g, n);
}

Rule replace_by(std::string_view name, Pattern pattern,
                std::function<int(const Graph&, const Node&)> same) {
  auto apply = [same = std::move(same)](Graph& g, int node) {
    int to = same(g, g.nodes[node]);
    return to >= 0 && replace_all_uses(g, g.nodes[node].output(), to) > 0;
  };
  return Rule{name, std::move(pattern), std::move(apply)};
}

int rewrite_to_fixed_point(Graph& g, std::span<const Rule> rules, int max_sweeps) {
  int rewrites = 0;
  for (int sweep = 0; sweep < max_sweeps; ++sweep) {
    int before = rewrites;
    for (std::size_t i = 0; i < g.nodes.size(); ++i)
      for (const Rule& r : rules)
        if (matches(g, g.nodes[i], r.pattern) && r.apply(g, static_cast<int>(i))) ++rewrites;
    if (rewrites == before) break;
  }
  return rewrites;
}

}  // namespace kiln::graph
