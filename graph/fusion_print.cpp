// Printing a partition: the text KILN_LOG=fusion and explain() show, and DOT with a cluster per
// group.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "graph/fusion.h"

namespace kiln::graph {

std::string_view fusion_kind_name(FusionKind kind) {
  switch (kind) {
    case FusionKind::pointwise:
      return "pointwise";
    case FusionKind::reduction:
      return "reduction";
    case FusionKind::normalization:
      return "normalization";
    case FusionKind::view:
      return "view";
    case FusionKind::matmul:
      return "matmul";
    case FusionKind::index:
      return "index";
    case FusionKind::scan:
      return "scan";
    case FusionKind::sort:
      return "sort";
    case FusionKind::cached_attention:
      return "cached_attention";
    case FusionKind::movement:
      return "movement";
    case FusionKind::transfer:
      return "transfer";
    case FusionKind::attention:
      return "attention";
    case FusionKind::unrendered:
      return "unrendered";
  }
  return "?";
}

bool FusionGroup::launches() const {
  return kind != FusionKind::view;
}

int Partition::launch_count() const {
  return static_cast<int>(std::count_if(groups.begin(), groups.end(),
                                        [](const FusionGroup& g) { return g.launches(); }));
}

std::string Partition::str(const Graph& graph) const {
  std::string out = fmt::format("fusion of '{}': {} groups, {} launches\n", graph.name,
                                groups.size(), launch_count());
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const FusionGroup& g = groups[i];
    std::vector<std::string> parts;
    for (const auto& s : g.domain) parts.push_back(s.str());
    std::string rows = g.reduce_dims.empty()
                           ? std::string()
                           : fmt::format(" rows over dims [{}]", fmt::join(g.reduce_dims, ", "));
    out += fmt::format("  group {} {} '{}' over [{}]{}{}\n", i, fusion_kind_name(g.kind), g.name,
                       fmt::join(parts, ", "), rows, g.launches() ? "" : " (host only)");
    for (int n : g.nodes) {
      const Node& node = graph.nodes[n];
      std::vector<std::string> outs, ins;
      for (int v : node.outputs) outs.push_back(fmt::format("%{}", v));
      for (int v : node.inputs) ins.push_back(fmt::format("%{}", v));
      out += fmt::format("    {} = {}({})\n", fmt::join(outs, ", "), node.op, fmt::join(ins, ", "));
    }
    auto values = [](const std::vector<int>& vs) {
      std::vector<std::string> s;
      for (int v : vs) s.push_back(fmt::format("%{}", v));
      return fmt::format("{}", fmt::join(s, ", "));
    };
    out += fmt::format("    reads {}; writes {}\n", values(g.inputs), values(g.outputs));
    if (!g.unrendered.empty()) out += fmt::format("    not rendered: {}\n", g.unrendered);
  }
  for (const UnfusedEdge& e : unfused)
    out += fmt::format("  not fused: %{} (group {}) -> {} (group {}): {}\n", e.value, e.producer,
                       graph.nodes[e.consumer_node].op, e.consumer, e.reason);
  return out;
}

std::string Partition::dot(const Graph& graph) const {
  std::vector<std::string> labels;
  for (std::size_t i = 0; i < groups.size(); ++i)
    labels.push_back(
        fmt::format("group {}: {} {}", i, fusion_kind_name(groups[i].kind), groups[i].name));
  return graph.dot(group_of, labels);
}

}  // namespace kiln::graph
