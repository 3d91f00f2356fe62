// The partitioner's first phase: what each joint node and value is (see partition_phases.h).
#include "jit/aot/partition_phases.h"

#include "graph/subgraph.h"

namespace kiln::jit::partition_phases {

using graph::Graph;
using graph::InputKind;

bool recomputable(OpId op) {
  switch (op_class(op)) {
    case OpClass::elementwise:
    case OpClass::view:
    case OpClass::movement:
      return true;
    case OpClass::reduction:
    case OpClass::scan:
    case OpClass::sort:
    case OpClass::cached_attention:
    case OpClass::normalization:
    case OpClass::index:
    case OpClass::matmul:
    case OpClass::transfer:
    case OpClass::attention:
      return false;
  }
  return false;
}

std::int64_t value_bytes(const graph::Value& v) {
  return numel(v.meta.shape) * static_cast<std::int64_t>(itemsize(v.meta.dtype));
}

bool JointRoles::is_tangent_input(const JointGraph& joint, int value) const {
  const graph::Input* in = input_of[value];
  return in && in->kind == InputKind::argument && in->arg_index >= joint.num_args;
}

namespace {

// Values that depend on a tangent belong to the backward; the rest could run in either.
void mark_tangents(const JointGraph& joint, JointRoles& r) {
  const Graph& g = joint.graph;
  for (const auto& in : g.inputs) r.tangent[in.value] = r.is_tangent_input(joint, in.value);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    for (int v : g.nodes[i].inputs) r.backward_node[i] = r.backward_node[i] || r.tangent[v];
    if (r.backward_node[i])
      for (int v : g.nodes[i].outputs) r.tangent[v] = true;
  }
}

// What the forward must compute: its outputs and everything they read.
void mark_forward(const JointGraph& joint, JointRoles& r) {
  const Graph& g = joint.graph;
  r.forward_node = graph::nodes_feeding(
      g, std::span(g.outputs).first(static_cast<std::size_t>(joint.num_forward_outputs)));
}

// What the backward reads of the forward's values.
void mark_backward_reads(const JointGraph& joint, JointRoles& r) {
  const Graph& g = joint.graph;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (r.backward_node[i])
      for (int v : g.nodes[i].inputs) r.backward_reads[v] = r.backward_reads[v] || !r.tangent[v];
  for (std::size_t k = joint.num_forward_outputs; k < g.outputs.size(); ++k)
    if (!r.tangent[g.outputs[k]]) r.backward_reads[g.outputs[k]] = true;
}

// What leaves a checkpoint region: values the forward returns or that forward code outside the
// region reads.
void mark_region_exits(const JointGraph& joint, JointRoles& r) {
  const Graph& g = joint.graph;
  for (std::size_t k = 0; k < joint.num_forward_outputs; ++k) r.leaves_region[g.outputs[k]] = true;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (r.forward_node[i])
      for (int v : g.nodes[i].inputs) {
        int p = g.values[v].producer;
        if (p >= 0 && g.nodes[p].checkpoint != g.nodes[i].checkpoint) r.leaves_region[v] = true;
      }
}

// A pointwise value the forward computes anyway and a backward matmul or indexing op reads
// (through views) would be written to memory by the backward if recomputed, so recomputing it
// trades no memory traffic away: it is saved (AOTAutograd bans the same recomputations). A
// LayerNorm's output read by its weight's gradient, GELU's output by the next layer's.
void mark_materialized(const JointGraph& joint, JointRoles& r) {
  const Graph& g = joint.graph;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    OpClass c = op_class(g.nodes[i].op);
    if (!r.backward_node[i] ||
        (c != OpClass::matmul && c != OpClass::index && c != OpClass::attention))
      continue;
    for (int v : g.nodes[i].inputs) {
      for (int p = g.values[v].producer;
           p >= 0 && !r.tangent[v] && op_class(g.nodes[p].op) == OpClass::view;
           p = g.values[v].producer)
        v = g.nodes[p].inputs[0];
      int p = g.values[v].producer;
      if (p >= 0 && !r.tangent[v] && r.forward_node[p] && g.nodes[p].checkpoint == 0 &&
          op_class(g.nodes[p].op) == OpClass::elementwise)
        r.materialized[v] = true;
    }
  }
}

// A checkpoint region's values are never saved, except what leaves it; what leaves it is not
// recomputed either, so that the backward recomputes one region at a time from what entered
// it, as PyTorch's checkpoint does.
void mark_save_rules(const JointGraph& joint, JointRoles& r) {
  const Graph& g = joint.graph;
  for (std::size_t value = 0; value < g.values.size(); ++value) {
    int v = static_cast<int>(value);
    int p = g.values[v].producer;
    if (r.tangent[v] || r.input_of[v] || p < 0) continue;
    const graph::Node& n = g.nodes[p];
    r.never_saved[v] = n.checkpoint != 0 && !r.leaves_region[v];
    bool once = n.checkpoint != 0 ? r.leaves_region[v] : !recomputable(n.op) || r.materialized[v];
    r.computed_once[v] = r.forward_node[p] && once;
  }
}

}  // namespace

JointRoles classify_joint(const JointGraph& joint) {
  const Graph& g = joint.graph;
  const std::size_t num_values = g.values.size(), num_nodes = g.nodes.size();
  JointRoles r;
  r.backward_node.assign(num_nodes, false);
  r.forward_node.assign(num_nodes, false);
  r.input_of.assign(num_values, nullptr);
  for (const auto& in : g.inputs) r.input_of[in.value] = &in;
  for (auto* per_value : {&r.tangent, &r.backward_reads, &r.leaves_region, &r.materialized,
                          &r.computed_once, &r.never_saved})
    per_value->assign(num_values, false);
  mark_tangents(joint, r);
  mark_forward(joint, r);
  mark_backward_reads(joint, r);
  mark_region_exits(joint, r);
  mark_materialized(joint, r);
  mark_save_rules(joint, r);
  return r;
}

}  // namespace kiln::jit::partition_phases
