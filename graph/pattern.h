// Rewrite rules as data: a pattern (an op, a predicate, patterns for the operands' producers)
// and what to do where it matches, applied by one driver to a fixed point. Passes made of local
// rules (graph/simplify.cpp) are a list of these.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "graph/graph.h"

namespace kiln::graph {

struct Pattern {
  std::optional<OpId> op;  // nullopt: any op
  // Also required of the node, which it may compare with its operands' producers; null: nothing.
  std::function<bool(const Graph&, const Node&)> when;
  // By position, for the node making each operand (a graph input matches none of them); fewer
  // than the node's operands leaves the rest free.
  std::vector<Pattern> operands;
};

// Whether node `n` and the producers of its operands match `p`.
bool matches(const Graph& g, const Node& n, const Pattern& p);

struct Rule {
  std::string_view name;
  Pattern pattern;
  // Edits the graph where node `node` matched, with the edits of graph/rewrite.h that leave the
  // node list as it is (in-place changes, replace_all_uses); returns whether anything changed.
  std::function<bool(Graph&, int node)> apply;
};

// A rule whose node computes nothing: every use of its output becomes `same(g, n)` (when >= 0).
Rule replace_by(std::string_view name, Pattern pattern,
                std::function<int(const Graph&, const Node&)> same);

// Tries the rules on each node in node order (each rule in turn, so a later rule sees an earlier
// one's edit), sweeping again until a sweep changes nothing or after `max_sweeps`; returns how many
// rewrites changed the graph.
int rewrite_to_fixed_point(Graph& g, std::span<const Rule> rules, int max_sweeps = 8);

}  // namespace kiln::graph
