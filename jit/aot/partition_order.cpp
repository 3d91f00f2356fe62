// The partitioner's last phase: the order the backward runs its nodes in (see
// partition_phases.h).
#include <functional>

#include "jit/aot/partition_phases.h"

namespace kiln::jit::partition_phases {

std::vector<int> order_backward(const JointGraph& joint, const JointRoles& roles,
                                const BackwardSlice& slice) {
  const graph::Graph& g = joint.graph;
  std::vector<int> order;
  std::vector<bool> emitted(g.nodes.size(), false);
  // Recomputation runs just before the first node that needs it.
  std::function<void(int)> emit = [&](int i) {
    if (emitted[i]) return;
    emitted[i] = true;
    for (int u : g.nodes[i].inputs) {
      int p = g.values[u].producer;
      if (p >= 0 && slice.nodes[p] && !roles.tangent[u]) emit(p);
    }
    order.push_back(i);
  };
  // Gradient nodes in their order (what they read of other gradient nodes came earlier), then
  // whatever no tangent reaches.
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (slice.nodes[i] && roles.backward_node[i]) emit(static_cast<int>(i));
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (slice.nodes[i]) emit(static_cast<int>(i));
  return order;
}

}  // namespace kiln::jit::partition_phases
