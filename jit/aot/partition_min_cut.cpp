// The partitioner's flow network and its minimum cut (see partition_phases.h).
#include "jit/aot/partition_phases.h"

// GCC reports a false maybe-uninitialized inside Boost's edge iterator (an optional it never
// reads unset) once the max-flow code is inlined here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/boykov_kolmogorov_max_flow.hpp>
#pragma GCC diagnostic pop
#include <deque>

namespace kiln::jit::partition_phases {

using graph::Graph;
using graph::InputKind;

namespace {

// The cost of saving value v (made by node n): its bytes, doubled so that ties can be broken.
// Of a library or reduction result or a view and the value after it of the same bytes (matmul
// then + bias, a permute then the reshape that copies it), the later one is saved, so the
// backward does not redo the step and the forward can fuse it (a cuBLASLt epilogue).
std::int64_t save_cost(const Graph& g, const graph::Node& n, const graph::Value& val) {
  bool copies = n.op == OpId::reshape && g.values[n.inputs[0]].strides == StrideClass::general;
  bool view = op_class(n.op) == OpClass::view && !copies;
  return 2 * value_bytes(val) + (recomputable(n.op) && !view ? 0 : 1);
}

}  // namespace

std::int64_t FlowNetwork::capacity(int from, int to) const {
  for (const auto& e : edges)
    if (e.from == from && e.to == to) return e.capacity;
  return -1;
}

FlowNetwork build_flow_network(const JointGraph& joint, const JointRoles& roles) {
  const Graph& g = joint.graph;
  using N = FlowNetwork;
  N net;
  net.num_vertices = 2 + 2 * static_cast<int>(g.values.size());
  auto add = [&](int u, int v, std::int64_t c) { net.edges.push_back({u, v, c}); };
  for (std::size_t value = 0; value < g.values.size(); ++value) {
    int v = static_cast<int>(value);
    if (roles.tangent[v]) continue;
    const graph::Value& val = g.values[v];
    if (const graph::Input* in = roles.input_of[v]) {
      // A constant is part of either graph for free; an input of the call is alive anyway.
      if (in->kind == InputKind::constant) {
        add(N::in_vertex(v), N::out_vertex(v), N::infinite);
      } else {
        add(N::source, N::in_vertex(v), N::infinite);
        add(N::in_vertex(v), N::out_vertex(v), 0);
      }
    } else if (val.producer >= 0) {  // else a value a pass removed: not in the graph
      std::int64_t cost = save_cost(g, g.nodes[val.producer], val);
      add(N::in_vertex(v), N::out_vertex(v), roles.never_saved[v] ? N::infinite : cost);
      if (roles.computed_once[v]) add(N::source, N::in_vertex(v), N::infinite);
    }
    if (roles.backward_reads[v]) add(N::out_vertex(v), N::sink, N::infinite);
  }
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    if (roles.backward_node[i]) continue;
    for (int u : g.nodes[i].inputs)
      for (int v : g.nodes[i].outputs) add(N::out_vertex(u), N::in_vertex(v), N::infinite);
  }
  return net;
}

bool MinCut::saves(int value) const {
  return source_side[FlowNetwork::in_vertex(value)] && !source_side[FlowNetwork::out_vertex(value)];
}

namespace {

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

FlowGraph to_boost(const FlowNetwork& n) {
  FlowGraph net(static_cast<std::size_t>(n.num_vertices));
  auto capacity = boost::get(boost::edge_capacity, net);
  auto reverse = boost::get(boost::edge_reverse, net);
  for (const auto& edge : n.edges) {
    auto e = boost::add_edge(edge.from, edge.to, net).first;
    auto r = boost::add_edge(edge.to, edge.from, net).first;
    capacity[e] = edge.capacity;
    capacity[r] = 0;
    reverse[e] = r;
    reverse[r] = e;
  }
  return net;
}

}  // namespace

// Source-side vertices of a minimum cut: those the source reaches in the residual network.
MinCut solve_min_cut(const FlowNetwork& n) {
  FlowGraph net = to_boost(n);
  MinCut cut;
  cut.flow = boost::boykov_kolmogorov_max_flow(net, FlowNetwork::source, FlowNetwork::sink);
  auto residual = boost::get(boost::edge_residual_capacity, net);
  cut.source_side.assign(boost::num_vertices(net), false);
  std::deque<int> queue{FlowNetwork::source};
  cut.source_side[FlowNetwork::source] = true;
  while (!queue.empty()) {
    int u = queue.front();
    queue.pop_front();
    for (auto [e, end] = boost::out_edges(u, net); e != end; ++e) {
      int v = static_cast<int>(boost::target(*e, net));
      if (!cut.source_side[v] && residual[*e] > 0) {
        cut.source_side[v] = true;
        queue.push_back(v);
      }
    }
  }
  return cut;
}

}  // namespace kiln::jit::partition_phases
