// The min-cut partition of a joint graph: its phases (partition_phases.h) in order.
//
// The flow network has two vertices per tangent-independent value v, in(v) -> out(v) with the
// cost of saving v as capacity; out(u) -> in(v) for every node reading u and making v
// (infinite: a cut never falls on an edge between values). The source feeds the call's inputs
// and every value the forward must compute and must not recompute; the sink drains every value
// the backward reads. The values whose in -> out edge the minimum cut crosses are saved;
// everything between them and the backward is recomputed there.
#include "jit/aot/partition.h"

#include <algorithm>

#include <fmt/format.h>

#include "graph/pipeline.h"
#include "graph/subgraph.h"
#include "jit/aot/partition_phases.h"

namespace kiln::jit {

std::int64_t AotPartition::saved_activation_bytes() const {
  std::int64_t total = 0;
  for (const auto& s : saved)
    if (!s.is_input) total += s.bytes;
  return total;
}

std::string AotPartition::str() const {
  std::string out = fmt::format("forward graph:\n{}", forward.str());
  out += fmt::format("saved for the backward: {} values, {} bytes of activations\n", saved.size(),
                     saved_activation_bytes());
  std::size_t first = forward.outputs.size() - saved.size();
  for (std::size_t i = 0; i < saved.size(); ++i)
    out += fmt::format("  %{} {} ({} bytes): {}\n", forward.outputs[first + i],
                       graph::value_type_str(forward.values[forward.outputs[first + i]]),
                       saved[i].bytes, saved[i].why);
  out += fmt::format("backward graph ({} forward nodes recomputed):\n{}", recomputed_nodes,
                     backward.str());
  return out;
}

AotPartition partition_joint(const JointGraph& joint) {
  using namespace partition_phases;
  const graph::Graph& g = joint.graph;
  JointRoles roles = classify_joint(joint);
  MinCut cut = solve_min_cut(build_flow_network(joint, roles));
  AotPartition part;
  part.saved = choose_saved(joint, roles, cut);
  BackwardSlice backward = extract_backward(joint, roles, part.saved);
  // The cut may save an input at no cost that the backward never reads; kept, it would be a
  // saved tensor to a write-back into that input (a buffer updated in place) for nothing.
  auto read = [&](const SavedValue& s) {
    return std::any_of(backward.inputs.begin(), backward.inputs.end(),
                       [&](const auto& in) { return in.first == s.joint_value; });
  };
  if (!std::all_of(part.saved.begin(), part.saved.end(), read)) {
    std::erase_if(part.saved, [&](const SavedValue& s) { return !read(s); });
    backward = extract_backward(joint, roles, part.saved);
  }
  part.gradient_sources = gradient_sources(joint, roles);
  std::vector<int> backward_nodes = order_backward(joint, roles, backward);
  std::vector<int> gradients(g.outputs.begin() + joint.num_forward_outputs, g.outputs.end());
  part.backward = graph::subgraph(g, backward.inputs, backward_nodes, gradients);
  ForwardSlice forward = extract_forward(joint, roles, part.saved);
  part.forward = graph::subgraph(g, forward.inputs, forward.nodes, forward.outputs);
  for (int i : backward_nodes) part.recomputed_nodes += forward.node_set[i];
  // Each graph keeps the constants it reads (and every argument).
  graph::run_pipeline(part.forward, graph::Pipeline::forward);
  graph::run_pipeline(part.backward, graph::Pipeline::backward);
  return part;
}

}  // namespace kiln::jit
