// The phases of partition_joint (partition.h), each a function from one typed value to the
// next, as PyTorch's min-cut partitioner (torch/_functorch/partitioners.py) is split:
//   classify_joint      what each joint node and value is (forward, backward, recomputable,
//                       computed once, never saved)
//   build_flow_network  the min-cut problem over those roles
//   solve_min_cut       the minimum cut: which values' save edges it crosses
//   choose_saved        the saved values, each with its bytes and why
//   extract_backward    the backward's nodes and arguments; extract_forward the forward's
//   order_backward      the order the backward runs its nodes in
// partition_joint composes them; each is tested alone (tests/test_aot_partition_phases.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"
#include "graph/subgraph.h"
#include "jit/aot/joint_graph.h"
#include "jit/aot/partition.h"

namespace kiln::jit::partition_phases {

// Pointwise and view ops are cheap to run again inside a backward kernel; the rest is not.
bool recomputable(OpId op);
// A value's bytes at its traced sizes.
std::int64_t value_bytes(const graph::Value& v);

// ---- classify ----
struct JointRoles {
  // Per joint node.
  std::vector<bool> backward_node;  // reads a tangent, directly or not: only the backward runs it
  std::vector<bool> forward_node;   // the forward's outputs need it
  // Per joint value.
  std::vector<const graph::Input*> input_of;  // the joint graph's input it is, or null
  std::vector<bool> tangent;                  // depends on a tangent: the backward's alone
  std::vector<bool> backward_reads;           // the backward reads it of the forward's values
  std::vector<bool> leaves_region;  // a forward output, or read outside the checkpoint region
  // A pointwise value the forward computes anyway that a backward matmul, indexing or attention
  // op reads (through views): recomputed, the backward would write it to memory again.
  std::vector<bool> materialized;
  // Made by a forward node that must not run twice (not recomputable, materialized, or leaving
  // a checkpoint region): the forward computes it, so the source feeds it.
  std::vector<bool> computed_once;
  // Inside a checkpoint region and not leaving it: never saved.
  std::vector<bool> never_saved;

  bool is_tangent_input(const JointGraph& joint, int value) const;
};
JointRoles classify_joint(const JointGraph& joint);

// ---- build the flow network ----
// Two vertices per tangent-independent value v, in(v) -> out(v) with the cost of saving v;
// out(u) -> in(v) for every forward node reading u and making v (infinite). The source feeds
// the call's inputs and every value computed once; the sink drains what the backward reads.
struct FlowEdge {
  int from = 0, to = 0;
  std::int64_t capacity = 0;
};
struct FlowNetwork {
  static constexpr int source = 0, sink = 1;
  static constexpr std::int64_t infinite = std::int64_t{1} << 60;
  static constexpr int in_vertex(int value) { return 2 + 2 * value; }
  static constexpr int out_vertex(int value) { return 3 + 2 * value; }
  int num_vertices = 2;
  std::vector<FlowEdge> edges;  // in the order they are added to the solver
  // The capacity of the edge from -> to, or -1 when there is none.
  std::int64_t capacity(int from, int to) const;
};
FlowNetwork build_flow_network(const JointGraph& joint, const JointRoles& roles);

// ---- solve ----
struct MinCut {
  std::int64_t flow = 0;          // the maximum flow: the cut's capacity
  std::vector<bool> source_side;  // per vertex: reached from the source in the residual network
  // Whether the cut crosses value v's save edge (in(v) -> out(v)): v is saved.
  bool saves(int value) const;
};
MinCut solve_min_cut(const FlowNetwork& net);

// ---- extract ----
// The values the cut saves, in value order, each with its bytes and why.
std::vector<SavedValue> choose_saved(const JointGraph& joint, const JointRoles& roles,
                                     const MinCut& cut);

// What the backward runs: from the gradients back to tangents, saved values and constants.
struct BackwardSlice {
  std::vector<bool> nodes;       // per joint node
  graph::SubgraphInputs inputs;  // the saved values, then the tangents (by argument index)
};
BackwardSlice extract_backward(const JointGraph& joint, const JointRoles& roles,
                               const std::vector<SavedValue>& saved);
// Per gradient output: the forward outputs whose incoming gradients it reads.
std::vector<std::vector<int>> gradient_sources(const JointGraph& joint, const JointRoles& roles);

// What the forward runs: its outputs and the saved values, from the call's inputs.
struct ForwardSlice {
  std::vector<bool> node_set;  // per joint node
  std::vector<int> nodes;      // in joint order
  graph::SubgraphInputs inputs;
  std::vector<int> outputs;  // the function's outputs, then the saved values
};
ForwardSlice extract_forward(const JointGraph& joint, const JointRoles& roles,
                             const std::vector<SavedValue>& saved);

// ---- order ----
// The backward's nodes in the order to run them: gradient nodes in joint order, each after the
// recomputation it reads, which runs as late as it can (recomputed activations, a checkpointed
// block's, are then not all alive at once); then whatever no tangent reaches.
std::vector<int> order_backward(const JointGraph& joint, const JointRoles& roles,
                                const BackwardSlice& slice);

}  // namespace kiln::jit::partition_phases
