// The partitioner's phases (jit/aot/partition_phases.h), each on small joint graphs built by
// hand, with expectations worked out by hand: a pointwise chain is recomputed, a matmul's output
// is saved, a checkpoint region is never saved, the min cut takes the cheaper side, and the
// backward recomputes as late as it can.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "jit/aot/partition_phases.h"

using namespace kiln;
using namespace kiln::jit::partition_phases;
using N = FlowNetwork;

namespace {

// A joint graph written out: the forward's arguments, its nodes, its outputs (each with a
// tangent), then the backward's nodes and gradients.
struct Joint {
  jit::JointGraph j;

  graph::Graph& g() { return j.graph; }
  int arg(const std::string& name, const Shape& shape) {
    graph::Input in;
    in.kind = graph::InputKind::argument;
    in.arg_index = j.num_args++;
    in.name = name;
    return j.graph.add_input(in, TensorMeta{shape, DType::f32});
  }
  int op(OpId id, std::vector<int> inputs, OpAttrs attrs = {}, int checkpoint = 0) {
    std::vector<TensorMeta> metas;
    for (int v : inputs) metas.push_back(j.graph.values[v].meta);
    auto outs = infer_meta(id, metas, attrs);
    graph::Node n;
    n.op = id;
    n.attrs = attrs;
    n.inputs = std::move(inputs);
    n.checkpoint = checkpoint;
    int node = j.graph.add_node(std::move(n), outs);
    return j.graph.nodes[node].output();
  }
  int node_of(int value) const { return j.graph.values[value].producer; }
  // The forward's outputs; returns their tangents (arguments after the forward's).
  std::vector<int> forward_outputs(const std::vector<int>& outs) {
    j.graph.outputs = outs;
    j.num_forward_outputs = outs.size();
    std::vector<int> tangents;
    for (std::size_t k = 0; k < outs.size(); ++k) {
      graph::Input in;
      in.kind = graph::InputKind::argument;
      in.arg_index = j.num_args + static_cast<int>(k);
      in.name = "t" + std::to_string(k);
      tangents.push_back(j.graph.add_input(in, j.graph.values[outs[k]].meta));
      j.tangent_arg.push_back(in.arg_index);
      j.output_requires_grad.push_back(true);
    }
    return tangents;
  }
  void gradients(const std::vector<int>& grads) {
    j.graph.outputs.insert(j.graph.outputs.end(), grads.begin(), grads.end());
  }
};

OpAttrs dims(std::vector<std::int64_t> d) {
  OpAttrs a;
  a.dims = std::move(d);
  return a;
}
OpAttrs shape(Shape s) {
  OpAttrs a;
  a.shape = std::move(s);
  return a;
}

std::vector<int> saved_values(const std::vector<jit::SavedValue>& saved) {
  std::vector<int> out;
  for (const auto& s : saved) out.push_back(s.joint_value);
  return out;
}

const jit::SavedValue* find_saved(const std::vector<jit::SavedValue>& saved, int v) {
  for (const auto& s : saved)
    if (s.joint_value == v) return &s;
  return nullptr;
}

// y = exp(tanh(x)); dx reads tanh(x): the chain is recomputed from x.
struct PointwiseChain {
  Joint j;
  int x, a, y, t, gx;
  PointwiseChain() {
    x = j.arg("x", {4, 4});
    a = j.op(OpId::tanh, {x});
    y = j.op(OpId::exp, {a});
    t = j.forward_outputs({y})[0];
    gx = j.op(OpId::mul, {t, a});
    j.gradients({gx});
  }
};

// m = x @ w, y = tanh(m); the backward reads m (dm = t * m), w and x (through a permute).
struct MatmulLayer {
  Joint j;
  int x, w, m, y, t, gm, xt, gw;
  MatmulLayer() {
    x = j.arg("x", {4, 4});
    w = j.arg("w", {4, 4});
    m = j.op(OpId::matmul, {x, w});
    y = j.op(OpId::tanh, {m});
    t = j.forward_outputs({y})[0];
    gm = j.op(OpId::mul, {t, m});
    xt = j.op(OpId::permute, {x}, dims({1, 0}));
    gw = j.op(OpId::matmul, {xt, gm});
    j.gradients({gw});
  }
};

// Checkpoint region 1: a = tanh(x), b = a @ w, y = exp(b) (returned). The backward reads y,
// and a through a permute (the weight's gradient).
struct CheckpointedBlock {
  Joint j;
  int x, w, a, b, y, t, gb, at, gw;
  CheckpointedBlock() {
    x = j.arg("x", {4, 4});
    w = j.arg("w", {4, 4});
    a = j.op(OpId::tanh, {x}, {}, 1);
    b = j.op(OpId::matmul, {a, w}, {}, 1);
    y = j.op(OpId::exp, {b}, {}, 1);
    t = j.forward_outputs({y})[0];
    gb = j.op(OpId::mul, {t, y});
    at = j.op(OpId::permute, {a}, dims({1, 0}));
    gw = j.op(OpId::matmul, {at, gb});
    j.gradients({gw});
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(aot_partition_phases)

BOOST_AUTO_TEST_CASE(classify_tells_forward_from_backward_and_what_is_computed_once) {
  PointwiseChain c;
  JointRoles r = classify_joint(c.j.j);
  BOOST_TEST(r.forward_node[c.j.node_of(c.a)]);
  BOOST_TEST(r.forward_node[c.j.node_of(c.y)]);
  BOOST_TEST(!r.backward_node[c.j.node_of(c.a)]);
  BOOST_TEST(r.backward_node[c.j.node_of(c.gx)]);
  BOOST_TEST(!r.forward_node[c.j.node_of(c.gx)]);
  BOOST_TEST(r.tangent[c.t]);
  BOOST_TEST(r.tangent[c.gx]);
  BOOST_TEST(!r.tangent[c.a]);
  BOOST_TEST(r.backward_reads[c.a]);
  BOOST_TEST(!r.backward_reads[c.x]);
  BOOST_TEST(r.is_tangent_input(c.j.j, c.t));
  BOOST_TEST(!r.is_tangent_input(c.j.j, c.x));
  // Pointwise: recomputable, so nothing is computed once; y leaves no region (there is none).
  BOOST_TEST(!r.computed_once[c.a]);
  BOOST_TEST(!r.computed_once[c.y]);
  BOOST_TEST(!r.never_saved[c.a]);

  MatmulLayer m;
  JointRoles mr = classify_joint(m.j.j);
  BOOST_TEST(mr.computed_once[m.m]);  // a matmul runs once
  BOOST_TEST(!mr.computed_once[m.y]);
  BOOST_TEST(mr.backward_reads[m.m]);
  BOOST_TEST(mr.backward_reads[m.xt]);  // the permute is the forward's, read by the backward
  BOOST_TEST(!mr.backward_node[m.j.node_of(m.xt)]);

  CheckpointedBlock b;
  JointRoles br = classify_joint(b.j.j);
  BOOST_TEST(br.never_saved[b.a]);
  BOOST_TEST(br.never_saved[b.b]);  // a matmul inside a region is recomputed too
  BOOST_TEST(!br.never_saved[b.y]);
  BOOST_TEST(br.leaves_region[b.y]);  // returned
  BOOST_TEST(br.computed_once[b.y]);
  BOOST_TEST(!br.computed_once[b.b]);
}

BOOST_AUTO_TEST_CASE(classify_marks_a_pointwise_value_a_backward_matmul_reads_as_materialized) {
  // y = tanh(x) @ w: dw = tanh(x)^T @ t would store tanh(x) again if the backward recomputed it.
  Joint j;
  int x = j.arg("x", {4, 4}), w = j.arg("w", {4, 4});
  int a = j.op(OpId::tanh, {x});
  int y = j.op(OpId::matmul, {a, w});
  int t = j.forward_outputs({y})[0];
  int at = j.op(OpId::permute, {a}, dims({1, 0}));
  j.gradients({j.op(OpId::matmul, {at, t})});
  JointRoles r = classify_joint(j.j);
  BOOST_TEST(r.materialized[a]);
  BOOST_TEST(r.computed_once[a]);
  BOOST_TEST(!r.materialized[at]);  // a view: what it reads is marked
  auto saved = choose_saved(j.j, r, solve_min_cut(build_flow_network(j.j, r)));
  const jit::SavedValue* s = find_saved(saved, a);
  BOOST_TEST_REQUIRE(s != nullptr);
  BOOST_TEST(s->why.find("a backward matmul or indexing op reads it") != std::string::npos, s->why);
}

BOOST_AUTO_TEST_CASE(the_flow_network_prices_each_value_by_its_bytes) {
  MatmulLayer m;
  JointRoles r = classify_joint(m.j.j);
  FlowNetwork net = build_flow_network(m.j.j, r);
  BOOST_TEST(net.num_vertices == 2 + 2 * static_cast<int>(m.j.g().values.size()));
  // An input: fed by the source, free to keep.
  BOOST_TEST(net.capacity(N::source, N::in_vertex(m.x)) == N::infinite);
  BOOST_TEST(net.capacity(N::in_vertex(m.x), N::out_vertex(m.x)) == 0);
  // 4x4 f32 = 64 bytes, doubled; +1 for a value not recomputed (the matmul) or a view.
  BOOST_TEST(net.capacity(N::in_vertex(m.m), N::out_vertex(m.m)) == 129);
  BOOST_TEST(net.capacity(N::in_vertex(m.y), N::out_vertex(m.y)) == 128);
  BOOST_TEST(net.capacity(N::in_vertex(m.xt), N::out_vertex(m.xt)) == 129);
  // Computed once: fed by the source. Read by the backward: drained by the sink.
  BOOST_TEST(net.capacity(N::source, N::in_vertex(m.m)) == N::infinite);
  BOOST_TEST(net.capacity(N::source, N::in_vertex(m.y)) == -1);
  BOOST_TEST(net.capacity(N::out_vertex(m.m), N::sink) == N::infinite);
  // Forward nodes link values; tangents and backward nodes are not in the network.
  BOOST_TEST(net.capacity(N::out_vertex(m.x), N::in_vertex(m.m)) == N::infinite);
  BOOST_TEST(net.capacity(N::out_vertex(m.m), N::in_vertex(m.gm)) == -1);
  BOOST_TEST(net.capacity(N::in_vertex(m.t), N::out_vertex(m.t)) == -1);

  CheckpointedBlock b;
  FlowNetwork bnet = build_flow_network(b.j.j, classify_joint(b.j.j));
  BOOST_TEST(bnet.capacity(N::in_vertex(b.a), N::out_vertex(b.a)) == N::infinite);
  BOOST_TEST(bnet.capacity(N::in_vertex(b.b), N::out_vertex(b.b)) == N::infinite);
  BOOST_TEST(bnet.capacity(N::in_vertex(b.y), N::out_vertex(b.y)) == 128);
}

BOOST_AUTO_TEST_CASE(the_min_cut_takes_the_cheaper_side) {
  // s = sum(x, 1) [4] runs once; c = exp(expand(s)) [4, 4] is what the backward reads. Keeping s
  // (2 * 16 + 1) is cheaper than keeping c (2 * 64): the cut saves s and recomputes c.
  Joint j;
  int x = j.arg("x", {4, 4});
  int s = j.op(OpId::sum, {x}, dims({1}));
  int e = j.op(OpId::expand, {s}, shape({4, 4}));
  int c = j.op(OpId::exp, {e});
  int t = j.forward_outputs({c})[0];
  j.gradients({j.op(OpId::mul, {t, c})});
  JointRoles r = classify_joint(j.j);
  MinCut cut = solve_min_cut(build_flow_network(j.j, r));
  BOOST_TEST(cut.flow == 33);
  BOOST_TEST(cut.saves(s));
  BOOST_TEST(!cut.saves(c));
  BOOST_TEST(cut.saves(x));  // an input's save edge is free: it is kept as it is

  // m = x @ w [4, 4] runs once; the backward reads k = m > w, bool [4, 4]: keeping k
  // (2 * 16) is cheaper than keeping m (2 * 64 + 1), as relu's mask is.
  Joint k;
  int kx = k.arg("x", {4, 4}), kw = k.arg("w", {4, 4});
  int km = k.op(OpId::matmul, {kx, kw});
  int kk = k.op(OpId::gt, {km, kw});
  int ky = k.op(OpId::tanh, {km});
  int kt = k.forward_outputs({ky})[0];
  k.gradients({k.op(OpId::mul, {kt, kk})});
  JointRoles kr = classify_joint(k.j);
  MinCut kcut = solve_min_cut(build_flow_network(k.j, kr));
  BOOST_TEST(kcut.flow == 32);
  BOOST_TEST(kcut.saves(kk));
  BOOST_TEST(!kcut.saves(km));
  auto saved = choose_saved(k.j, kr, kcut);
  BOOST_TEST(saved_values(saved) == (std::vector<int>{kx, kw, kk}));
  BOOST_TEST(saved[2].bytes == 16);
  BOOST_TEST(saved[2].why == "cheaper to keep than what recomputing it would need to keep");
}

BOOST_AUTO_TEST_CASE(choose_saved_keeps_inputs_and_matmul_outputs_and_never_a_region) {
  PointwiseChain c;
  JointRoles cr = classify_joint(c.j.j);
  auto chain = choose_saved(c.j.j, cr, solve_min_cut(build_flow_network(c.j.j, cr)));
  // The chain is recomputed from x: only x is kept, and x costs nothing.
  BOOST_TEST(saved_values(chain) == std::vector<int>{c.x});
  BOOST_TEST(chain[0].is_input);
  BOOST_TEST(chain[0].why == "an input of the call (x), kept as it is");

  MatmulLayer m;
  JointRoles mr = classify_joint(m.j.j);
  auto layer = choose_saved(m.j.j, mr, solve_min_cut(build_flow_network(m.j.j, mr)));
  // Every input whose save edge the cut crosses is kept (w too, though no gradient reads it).
  BOOST_TEST(saved_values(layer) == (std::vector<int>{m.x, m.w, m.m}));
  BOOST_TEST(layer[2].bytes == 64);
  BOOST_TEST(!layer[2].is_input);
  BOOST_TEST(layer[2].why == "made by matmul, which is never computed twice");

  CheckpointedBlock b;
  JointRoles br = classify_joint(b.j.j);
  auto block = choose_saved(b.j.j, br, solve_min_cut(build_flow_network(b.j.j, br)));
  // What enters the region (x, w) and what leaves it (y): never a, never the matmul's b.
  BOOST_TEST(saved_values(block) == (std::vector<int>{b.x, b.w, b.y}));
  BOOST_TEST(find_saved(block, b.y)->why == "leaves checkpoint region 1");
  BOOST_TEST(!find_saved(block, b.a));
  BOOST_TEST(!find_saved(block, b.b));
}

BOOST_AUTO_TEST_CASE(extract_backward_reads_saved_values_then_tangents) {
  MatmulLayer m;
  JointRoles r = classify_joint(m.j.j);
  auto saved = choose_saved(m.j.j, r, solve_min_cut(build_flow_network(m.j.j, r)));
  BackwardSlice slice = extract_backward(m.j.j, r, saved);
  // The backward runs the permute of x again (a view), dm = t * m and dw.
  for (int v : {m.xt, m.gm, m.gw}) BOOST_TEST(slice.nodes[m.j.node_of(v)]);
  BOOST_TEST(!slice.nodes[m.j.node_of(m.m)]);
  BOOST_TEST(!slice.nodes[m.j.node_of(m.y)]);
  BOOST_TEST_REQUIRE(slice.inputs.size() == 3u);
  BOOST_TEST(slice.inputs[0].first == m.x);
  BOOST_TEST(slice.inputs[0].second.name == "saved0");
  BOOST_TEST(slice.inputs[1].first == m.m);
  BOOST_TEST(slice.inputs[1].second.arg_index == 2);
  BOOST_TEST(slice.inputs[2].first == m.t);
  BOOST_TEST(slice.inputs[2].second.arg_index == 3);  // after the saved values
  BOOST_TEST(slice.inputs[2].second.name == "t0");
  BOOST_TEST(gradient_sources(m.j.j, r) == std::vector<std::vector<int>>{{0}});
}

BOOST_AUTO_TEST_CASE(extract_forward_returns_outputs_then_saved_values) {
  MatmulLayer m;
  JointRoles r = classify_joint(m.j.j);
  auto saved = choose_saved(m.j.j, r, solve_min_cut(build_flow_network(m.j.j, r)));
  ForwardSlice slice = extract_forward(m.j.j, r, saved);
  BOOST_TEST(slice.outputs == (std::vector<int>{m.y, m.x, m.w, m.m}));
  BOOST_TEST(slice.nodes == (std::vector<int>{m.j.node_of(m.m), m.j.node_of(m.y)}));
  BOOST_TEST_REQUIRE(slice.inputs.size() == 2u);  // x and w, not the tangent
  BOOST_TEST(slice.inputs[0].first == m.x);
  BOOST_TEST(slice.inputs[1].first == m.w);
}

BOOST_AUTO_TEST_CASE(order_recomputes_each_value_just_before_its_first_reader) {
  // y = tanh(x) + exp(x); dx = (t * exp(x)) * tanh(x). exp is recomputed before the first
  // product, tanh only before the second.
  Joint j;
  int x = j.arg("x", {4, 4});
  int a = j.op(OpId::tanh, {x});
  int b = j.op(OpId::exp, {x});
  int y = j.op(OpId::add, {a, b});
  int t = j.forward_outputs({y})[0];
  int g1 = j.op(OpId::mul, {t, b});
  int g2 = j.op(OpId::mul, {g1, a});
  j.gradients({g2});
  JointRoles r = classify_joint(j.j);
  auto saved = choose_saved(j.j, r, solve_min_cut(build_flow_network(j.j, r)));
  BOOST_TEST(saved_values(saved) == std::vector<int>{x});
  BackwardSlice slice = extract_backward(j.j, r, saved);
  std::vector<int> order = order_backward(j.j, r, slice);
  BOOST_TEST(order == (std::vector<int>{j.node_of(b), j.node_of(g1), j.node_of(a), j.node_of(g2)}));
}

BOOST_AUTO_TEST_CASE(the_phases_compose_into_partition_joint) {
  CheckpointedBlock b;
  jit::AotPartition part = jit::partition_joint(b.j.j);
  // The cut saves w at no cost, but only the forward reads it (the weight's gradient is
  // tanh(x)^T (t * y)): partition_joint keeps what the backward reads.
  BOOST_TEST(saved_values(part.saved) == (std::vector<int>{b.x, b.y}));
  BOOST_TEST(part.recomputed_nodes == 1);  // tanh, for the weight's gradient
  BOOST_TEST(part.forward.outputs.size() == 3u);
  BOOST_TEST(part.gradient_sources == std::vector<std::vector<int>>{{0}});
}

BOOST_AUTO_TEST_SUITE_END()
