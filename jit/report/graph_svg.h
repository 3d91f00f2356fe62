// The report's graph pictures: Graphviz DOT for a partition (one box per fusion group, cut edges
// labelled with the fuser's reason; and every node, clustered by group, for small graphs),
// rendered to inline SVG by running `dot -Tsvg` when Graphviz is installed.
#pragma once

#include <optional>
#include <string>

#include "graph/fusion.h"
#include "graph/graph.h"
#include "jit/report/report_facts.h"

namespace kiln::jit::report {

// Graphs with more nodes get the group picture only: a picture of every node would be too
// large to read (and to lay out).
inline constexpr int kMaxNodesPictured = 250;

// DOT of the groups of `f` (collect_graph filled groups and cuts); elements get ids
// `<f.id>g<group>`, which the page's script makes clickable.
std::string groups_dot(const GraphFacts& f);
// DOT of every node of `graph`, clustered and coloured by group, cut edges labelled.
std::string nodes_dot(const graph::Graph& graph, const graph::Partition& fusion);

// The SVG Graphviz makes of `dot`, without its XML prolog; nullopt with `problem` set when
// Graphviz is absent or fails.
std::optional<std::string> render_svg(const std::string& dot, std::string& problem);

// Fills f.groups_svg, f.nodes_svg (small graphs) or f.svg_problem.
void render_pictures(const graph::Graph& graph, const graph::Partition& fusion, GraphFacts& f);

// The fill colour of group `group` (the pictures and the page's legend agree).
std::string group_colour(int group);

}  // namespace kiln::jit::report
