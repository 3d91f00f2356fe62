// The partitioner's extraction: the saved values, and what the forward and the backward each run
// (see partition_phases.h).
#include <fmt/format.h>

#include <algorithm>

#include "graph/subgraph.h"
#include "jit/aot/partition_phases.h"

namespace kiln::jit::partition_phases {

using graph::Graph;
using graph::InputKind;

namespace {

std::string why_saved(const Graph& g, const JointRoles& roles, int v) {
  if (const graph::Input* in = roles.input_of[v])
    return fmt::format("an input of the call ({}), kept as it is", in->name);
  const graph::Node& n = g.nodes[g.values[v].producer];
  if (n.checkpoint != 0) return fmt::format("leaves checkpoint region {}", n.checkpoint);
  if (!recomputable(n.op)) return fmt::format("made by {}, which is never computed twice", n.op);
  if (roles.materialized[v])
    return "a backward matmul or indexing op reads it: recomputed, it would be stored again";
  return "cheaper to keep than what recomputing it would need to keep";
}

// The backward argument a value the backward reads becomes: a saved value's, a tangent's, or
// (a constant) the input as it is.
graph::Input backward_argument(const JointGraph& joint, const JointRoles& roles, int v,
                               int saved_index, int num_saved) {
  const graph::Input* in = roles.input_of[v];
  if (saved_index < 0 && !roles.is_tangent_input(joint, v)) {
    KILN_CHECK(in->kind == InputKind::constant,
               "compile: internal error: the backward of '{}' reads input '{}', which the "
               "forward does not save",
               joint.graph.name, in->name);
    return *in;
  }
  graph::Input arg;
  arg.kind = InputKind::argument;
  arg.arg_index = saved_index >= 0 ? saved_index : num_saved + (in->arg_index - joint.num_args);
  arg.name = saved_index >= 0 ? fmt::format("saved{}", saved_index) : in->name;
  return arg;
}

}  // namespace

std::vector<SavedValue> choose_saved(const JointGraph& joint, const JointRoles& roles,
                                     const MinCut& cut) {
  const Graph& g = joint.graph;
  std::vector<SavedValue> saved;
  for (std::size_t value = 0; value < g.values.size(); ++value) {
    int v = static_cast<int>(value);
    if (roles.tangent[v] || !cut.saves(v)) continue;
    SavedValue s;
    s.joint_value = v;
    s.bytes = value_bytes(g.values[v]);
    s.is_input = roles.input_of[v] != nullptr;
    s.why = why_saved(g, roles, v);
    saved.push_back(std::move(s));
  }
  return saved;
}

BackwardSlice extract_backward(const JointGraph& joint, const JointRoles& roles,
                               const std::vector<SavedValue>& saved) {
  const Graph& g = joint.graph;
  std::vector<int> saved_index(g.values.size(), -1);  // value -> its argument in the backward
  for (std::size_t i = 0; i < saved.size(); ++i)
    saved_index[saved[i].joint_value] = static_cast<int>(i);
  const int num_saved = static_cast<int>(saved.size());
  BackwardSlice slice;
  slice.nodes.assign(g.nodes.size(), false);
  std::vector<bool> seen(g.values.size(), false);
  std::vector<int> stack(g.outputs.begin() + joint.num_forward_outputs, g.outputs.end());
  while (!stack.empty()) {
    int v = stack.back();
    stack.pop_back();
    if (seen[v]) continue;
    seen[v] = true;
    if (saved_index[v] >= 0 || roles.input_of[v]) {
      slice.inputs.emplace_back(v, backward_argument(joint, roles, v, saved_index[v], num_saved));
      continue;
    }
    int p = g.values[v].producer;
    slice.nodes[p] = true;
    for (int u : g.nodes[p].inputs) stack.push_back(u);
  }
  std::sort(slice.inputs.begin(), slice.inputs.end(),
            [](const auto& a, const auto& b) { return a.second.arg_index < b.second.arg_index; });
  return slice;
}

std::vector<std::vector<int>> gradient_sources(const JointGraph& joint, const JointRoles& roles) {
  const Graph& g = joint.graph;
  std::vector<int> output_of_tangent(g.inputs.size() + joint.tangent_arg.size(), -1);
  for (std::size_t k = 0; k < joint.tangent_arg.size(); ++k)
    if (joint.tangent_arg[k] >= 0)
      output_of_tangent[joint.tangent_arg[k] - joint.num_args] = static_cast<int>(k);
  std::vector<std::vector<int>> result;
  for (std::size_t k = joint.num_forward_outputs; k < g.outputs.size(); ++k) {
    std::vector<int> sources;
    std::vector<bool> reached(g.values.size(), false);
    std::vector<int> todo{g.outputs[k]};
    while (!todo.empty()) {
      int v = todo.back();
      todo.pop_back();
      if (reached[v] || !roles.tangent[v]) continue;
      reached[v] = true;
      if (const graph::Input* in = roles.input_of[v])
        sources.push_back(output_of_tangent[in->arg_index - joint.num_args]);
      else
        for (int u : g.nodes[g.values[v].producer].inputs) todo.push_back(u);
    }
    std::sort(sources.begin(), sources.end());
    result.push_back(std::move(sources));
  }
  return result;
}

ForwardSlice extract_forward(const JointGraph& joint, const JointRoles& roles,
                             const std::vector<SavedValue>& saved) {
  const Graph& g = joint.graph;
  ForwardSlice slice;
  slice.outputs.assign(g.outputs.begin(), g.outputs.begin() + joint.num_forward_outputs);
  for (const auto& s : saved) slice.outputs.push_back(s.joint_value);
  slice.node_set = graph::nodes_feeding(g, slice.outputs);
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (slice.node_set[i]) slice.nodes.push_back(static_cast<int>(i));
  for (const auto& in : g.inputs)
    if (!roles.is_tangent_input(joint, in.value)) slice.inputs.emplace_back(in.value, in);
  return slice;
}

}  // namespace kiln::jit::partition_phases
