// The min-cut partition of a joint graph.
//
// The flow network has two vertices per tangent-independent value v, in(v) -> out(v) with the
// cost of saving v as capacity; out(u) -> in(v) for every node reading u and making v
// (infinite: a cut never falls on an edge between values). The source feeds the call's inputs
// and every value the forward must compute and must not recompute; the sink drains every value
// the backward reads. The values whose in -> out edge the minimum cut crosses are saved;
// everything between them and the backward is recomputed there.
#include "jit/aot/partition.h"

// GCC reports a false maybe-uninitialized inside Boost's edge iterator (an optional it never
// reads unset) once the max-flow code is inlined here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/boykov_kolmogorov_max_flow.hpp>
#pragma GCC diagnostic pop
#include <deque>
#include <functional>

#include "graph/passes.h"
#include "graph/subgraph.h"

namespace kiln::jit {

using graph::Graph;
using graph::InputKind;

namespace {

// Pointwise and view ops are cheap to run again inside a backward kernel; the rest is not.
bool recomputable(OpId op) {
  switch (op_class(op)) {
    case OpClass::elementwise:
    case OpClass::view:
    case OpClass::movement:
      return true;
    case OpClass::reduction:
    case OpClass::scan:
    case OpClass::normalization:
    case OpClass::index:
    case OpClass::matmul:
    case OpClass::transfer:
    case OpClass::attention:
      return false;
  }
  return false;
}

std::int64_t bytes_of(const graph::Value& v) {
  return numel(v.meta.shape) * static_cast<std::int64_t>(itemsize(v.meta.dtype));
}

using FlowTraits = boost::adjacency_list_traits<boost::vecS, boost::vecS, boost::directedS>;
using FlowGraph = boost::adjacency_list<
    boost::vecS, boost::vecS, boost::directedS,
    boost::property<
        boost::vertex_color_t, boost::default_color_type,
        boost::property<boost::vertex_distance_t, long,
                        boost::property<boost::vertex_predecessor_t, FlowTraits::edge_descriptor>>>,
    boost::property<
        boost::edge_capacity_t, std::int64_t,
        boost::property<boost::edge_residual_capacity_t, std::int64_t,
                        boost::property<boost::edge_reverse_t, FlowTraits::edge_descriptor>>>>;

// Source-side vertices of a minimum cut: those the source reaches in the residual network.
std::vector<bool> min_cut_source_side(FlowGraph& net, int source, int sink) {
  boost::boykov_kolmogorov_max_flow(net, source, sink);
  auto residual = boost::get(boost::edge_residual_capacity, net);
  std::vector<bool> reached(boost::num_vertices(net), false);
  std::deque<int> queue{source};
  reached[source] = true;
  while (!queue.empty()) {
    int u = queue.front();
    queue.pop_front();
    for (auto [e, end] = boost::out_edges(u, net); e != end; ++e) {
      int v = static_cast<int>(boost::target(*e, net));
      if (!reached[v] && residual[*e] > 0) {
        reached[v] = true;
        queue.push_back(v);
      }
    }
  }
  return reached;
}

}  // namespace

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
  const Graph& g = joint.graph;
  const std::size_t num_values = g.values.size();
  std::vector<const graph::Input*> input_of(num_values, nullptr);
  for (const auto& in : g.inputs) input_of[in.value] = &in;
  auto is_tangent_input = [&](const graph::Input& in) {
    return in.kind == InputKind::argument && in.arg_index >= joint.num_args;
  };

  // Values that depend on a tangent belong to the backward; the rest could run in either.
  std::vector<bool> tangent(num_values, false), backward_node(g.nodes.size(), false);
  for (const auto& in : g.inputs) tangent[in.value] = is_tangent_input(in);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    for (int v : g.nodes[i].inputs) backward_node[i] = backward_node[i] || tangent[v];
    if (backward_node[i])
      for (int v : g.nodes[i].outputs) tangent[v] = true;
  }
  // What the forward must compute: its outputs and everything they read.
  std::vector<bool> forward_node(g.nodes.size(), false);
  auto mark_ancestors = [&](std::vector<int> stack, std::vector<bool>& nodes) {
    std::vector<bool> seen(num_values, false);
    while (!stack.empty()) {
      int v = stack.back();
      stack.pop_back();
      if (seen[v]) continue;
      seen[v] = true;
      int p = g.values[v].producer;
      if (p < 0) continue;
      nodes[p] = true;
      for (int u : g.nodes[p].inputs) stack.push_back(u);
    }
  };
  mark_ancestors({g.outputs.begin(), g.outputs.begin() + joint.num_forward_outputs}, forward_node);
  // What the backward reads of the forward's values.
  std::vector<bool> backward_reads(num_values, false);
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (backward_node[i])
      for (int v : g.nodes[i].inputs) backward_reads[v] = backward_reads[v] || !tangent[v];
  for (std::size_t k = joint.num_forward_outputs; k < g.outputs.size(); ++k)
    if (!tangent[g.outputs[k]]) backward_reads[g.outputs[k]] = true;

  // A checkpoint region's values are never saved, except what leaves it: values the forward
  // returns or that forward code outside the region reads.
  std::vector<bool> leaves_region(num_values, false);
  for (std::size_t k = 0; k < joint.num_forward_outputs; ++k) leaves_region[g.outputs[k]] = true;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (forward_node[i])
      for (int v : g.nodes[i].inputs) {
        int p = g.values[v].producer;
        if (p >= 0 && g.nodes[p].checkpoint != g.nodes[i].checkpoint) leaves_region[v] = true;
      }

  // A pointwise value the forward computes anyway and a backward matmul or indexing op reads
  // (through views) would be written to memory by the backward if recomputed, so recomputing it
  // trades no memory traffic away: it is saved (AOTAutograd bans the same recomputations). A
  // LayerNorm's output read by its weight's gradient, GELU's output by the next layer's.
  std::vector<bool> materialized(num_values, false);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    OpClass c = op_class(g.nodes[i].op);
    if (!backward_node[i] ||
        (c != OpClass::matmul && c != OpClass::index && c != OpClass::attention))
      continue;
    for (int v : g.nodes[i].inputs) {
      for (int p = g.values[v].producer;
           p >= 0 && !tangent[v] && op_class(g.nodes[p].op) == OpClass::view;
           p = g.values[v].producer)
        v = g.nodes[p].inputs[0];
      int p = g.values[v].producer;
      if (p >= 0 && !tangent[v] && forward_node[p] && g.nodes[p].checkpoint == 0 &&
          op_class(g.nodes[p].op) == OpClass::elementwise)
        materialized[v] = true;
    }
  }

  // The flow network.
  constexpr std::int64_t infinite = std::int64_t{1} << 60;
  const int source = 0, sink = 1;
  auto in_vertex = [](int v) { return 2 + 2 * v; };
  auto out_vertex = [](int v) { return 3 + 2 * v; };
  FlowGraph net(2 + 2 * num_values);
  auto capacity = boost::get(boost::edge_capacity, net);
  auto reverse = boost::get(boost::edge_reverse, net);
  auto add_edge = [&](int u, int v, std::int64_t c) {
    auto e = boost::add_edge(u, v, net).first;
    auto r = boost::add_edge(v, u, net).first;
    capacity[e] = c;
    capacity[r] = 0;
    reverse[e] = r;
    reverse[r] = e;
  };
  for (std::size_t value = 0; value < num_values; ++value) {
    int v = static_cast<int>(value);
    if (tangent[v]) continue;
    const graph::Value& val = g.values[v];
    if (const graph::Input* in = input_of[v]) {
      // A constant is part of either graph for free; an input of the call is alive anyway.
      if (in->kind == InputKind::constant) {
        add_edge(in_vertex(v), out_vertex(v), infinite);
      } else {
        add_edge(source, in_vertex(v), infinite);
        add_edge(in_vertex(v), out_vertex(v), 0);
      }
    } else if (val.producer >= 0) {  // else a value a pass removed: not in the graph
      const graph::Node& n = g.nodes[val.producer];
      bool discarded = n.checkpoint != 0 && !leaves_region[v];
      // Costs are doubled so that ties can be broken: of a library or reduction result or a
      // view and the value after it of the same bytes (matmul then + bias, a permute then the
      // reshape that copies it), the later one is saved, so the backward does not redo the step
      // and the forward can fuse it (a cuBLASLt epilogue).
      bool copies = n.op == OpId::reshape && g.values[n.inputs[0]].strides == StrideClass::general;
      bool view = op_class(n.op) == OpClass::view && !copies;
      std::int64_t cost = 2 * bytes_of(val) + (recomputable(n.op) && !view ? 0 : 1);
      add_edge(in_vertex(v), out_vertex(v), discarded ? infinite : cost);
      // What leaves a region is not recomputed either, so that the backward recomputes one
      // region at a time from what entered it, as PyTorch's checkpoint does.
      bool computed_once =
          n.checkpoint != 0 ? leaves_region[v] : !recomputable(n.op) || materialized[v];
      if (forward_node[val.producer] && computed_once) add_edge(source, in_vertex(v), infinite);
    }
    if (backward_reads[v]) add_edge(out_vertex(v), sink, infinite);
  }
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    if (backward_node[i]) continue;
    for (int u : g.nodes[i].inputs)
      for (int v : g.nodes[i].outputs) add_edge(out_vertex(u), in_vertex(v), infinite);
  }
  std::vector<bool> source_side = min_cut_source_side(net, source, sink);

  AotPartition part;
  std::vector<int> saved_args(num_values, -1);  // value -> its argument index in the backward
  for (std::size_t value = 0; value < num_values; ++value) {
    int v = static_cast<int>(value);
    if (tangent[v] || !source_side[in_vertex(v)] || source_side[out_vertex(v)]) continue;
    SavedValue s;
    s.joint_value = v;
    s.bytes = bytes_of(g.values[v]);
    s.is_input = input_of[v] != nullptr;
    int p = g.values[v].producer;
    if (s.is_input)
      s.why = fmt::format("an input of the call ({}), kept as it is", input_of[v]->name);
    else if (g.nodes[p].checkpoint != 0)
      s.why = fmt::format("leaves checkpoint region {}", g.nodes[p].checkpoint);
    else if (!recomputable(g.nodes[p].op))
      s.why = fmt::format("made by {}, which is never computed twice", g.nodes[p].op);
    else if (materialized[v])
      s.why = "a backward matmul or indexing op reads it: recomputed, it would be stored again";
    else
      s.why = "cheaper to keep than what recomputing it would need to keep";
    saved_args[v] = static_cast<int>(part.saved.size());
    part.saved.push_back(std::move(s));
  }

  // The backward: from the gradients back to tangents, saved values and constants.
  std::vector<bool> in_backward(g.nodes.size(), false);
  graph::SubgraphInputs backward_inputs;
  std::vector<bool> seen(num_values, false);
  std::vector<int> stack(g.outputs.begin() + joint.num_forward_outputs, g.outputs.end());
  int num_saved = static_cast<int>(part.saved.size());
  while (!stack.empty()) {
    int v = stack.back();
    stack.pop_back();
    if (seen[v]) continue;
    seen[v] = true;
    const graph::Input* in = input_of[v];
    if (saved_args[v] >= 0 || (in && is_tangent_input(*in))) {
      graph::Input arg;
      arg.kind = InputKind::argument;
      arg.arg_index =
          saved_args[v] >= 0 ? saved_args[v] : num_saved + (in->arg_index - joint.num_args);
      arg.name = saved_args[v] >= 0 ? fmt::format("saved{}", saved_args[v]) : in->name;
      backward_inputs.emplace_back(v, std::move(arg));
      continue;
    }
    if (in) {
      KILN_CHECK(in->kind == InputKind::constant,
                 "compile: internal error: the backward of '{}' reads input '{}', which the "
                 "forward does not save",
                 g.name, in->name);
      backward_inputs.emplace_back(v, *in);
      continue;
    }
    int p = g.values[v].producer;
    in_backward[p] = true;
    for (int u : g.nodes[p].inputs) stack.push_back(u);
  }
  std::vector<int> output_of_tangent(g.inputs.size() + joint.tangent_arg.size(), -1);
  for (std::size_t k = 0; k < joint.tangent_arg.size(); ++k)
    if (joint.tangent_arg[k] >= 0) output_of_tangent[joint.tangent_arg[k] - joint.num_args] = k;
  for (std::size_t k = joint.num_forward_outputs; k < g.outputs.size(); ++k) {
    std::vector<int> sources;
    std::vector<bool> reached(num_values, false);
    std::vector<int> todo{g.outputs[k]};
    while (!todo.empty()) {
      int v = todo.back();
      todo.pop_back();
      if (reached[v] || !tangent[v]) continue;
      reached[v] = true;
      if (const graph::Input* in = input_of[v])
        sources.push_back(output_of_tangent[in->arg_index - joint.num_args]);
      else
        for (int u : g.nodes[g.values[v].producer].inputs) todo.push_back(u);
    }
    std::sort(sources.begin(), sources.end());
    part.gradient_sources.push_back(std::move(sources));
  }
  // Recomputation runs as late as it can, just before the first node that needs it, so that
  // recomputed activations (a checkpointed block's) are not all alive at once.
  std::vector<int> backward_nodes;
  std::vector<bool> emitted(g.nodes.size(), false);
  std::function<void(int)> emit = [&](int i) {
    if (emitted[i]) return;
    emitted[i] = true;
    for (int u : g.nodes[i].inputs) {
      int p = g.values[u].producer;
      if (p >= 0 && in_backward[p] && !tangent[u]) emit(p);
    }
    backward_nodes.push_back(i);
  };
  // Gradient nodes in their order (what they read of other gradient nodes came earlier), then
  // whatever no tangent reaches.
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (in_backward[i] && backward_node[i]) emit(static_cast<int>(i));
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (in_backward[i]) emit(static_cast<int>(i));
  std::sort(backward_inputs.begin(), backward_inputs.end(),
            [](const auto& a, const auto& b) { return a.second.arg_index < b.second.arg_index; });
  part.backward = graph::subgraph(
      g, backward_inputs, backward_nodes,
      std::vector<int>(g.outputs.begin() + joint.num_forward_outputs, g.outputs.end()));

  // The forward: its outputs and the saved values, from the call's inputs.
  std::vector<int> forward_outputs(g.outputs.begin(),
                                   g.outputs.begin() + joint.num_forward_outputs);
  for (const auto& s : part.saved) forward_outputs.push_back(s.joint_value);
  std::vector<bool> in_forward(g.nodes.size(), false);
  mark_ancestors(forward_outputs, in_forward);
  std::vector<int> forward_nodes;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (in_forward[i]) forward_nodes.push_back(static_cast<int>(i));
  graph::SubgraphInputs forward_inputs;
  for (const auto& in : g.inputs)
    if (!is_tangent_input(in)) forward_inputs.emplace_back(in.value, in);
  part.forward = graph::subgraph(g, forward_inputs, forward_nodes, forward_outputs);
  for (int i : backward_nodes) part.recomputed_nodes += in_forward[i];
  // Each graph keeps the constants it reads (and every argument).
  graph::eliminate_dead_code(part.forward);
  graph::eliminate_dead_code(part.backward);
  graph::transpose_matmul_results(part.backward);  // weight gradients come out contiguous
  return part;
}

}  // namespace kiln::jit
