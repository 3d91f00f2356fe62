// Gathers the report's facts about one compiled entry from what the compiler made: guards,
// graph and fusion, plans with their kernels' cache metadata, and the training partition.
#pragma once

#include <string>

#include "graph/fusion.h"
#include "graph/graph.h"
#include "jit/aot/aot_program.h"
#include "jit/guards.h"
#include "jit/kernel_plan.h"
#include "jit/report/report_facts.h"

namespace kiln::jit::report {

// One entry of a compiled function as CompiledFunctionCore holds it.
struct EntryParts {
  int index = 0;
  const std::string& reason;
  const GuardSet& guards;
  const graph::Graph& graph;
  const graph::Partition& fusion;
  const KernelPlan* plan = nullptr;
  const AotProgram* aot = nullptr;
  const std::string& aot_fallback;
  double compile_ms = 0;
};

EntryFacts collect_entry(const EntryParts& parts);

// A graph and its fusion groups, cut edges and pictures (graph_svg.h).
// `id` prefixes the ids of the picture's elements (unique on a page).
GraphFacts collect_graph(const graph::Graph& graph, const graph::Partition& fusion,
                         std::string title, const std::string& id);
ProgramFacts collect_program(const graph::Graph& graph, const graph::Partition& fusion,
                             const KernelPlan& plan, std::string title, const std::string& id);
// "%3: f32[4, 8] = add(%1, %2)"
std::string node_line(const graph::Graph& graph, int node);

}  // namespace kiln::jit::report
