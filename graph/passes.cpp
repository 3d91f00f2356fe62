// DCE, CSE, constant folding and algebraic simplification.
#include "graph/passes.h"

#include <cstring>
#include <map>

#include "autograd/grad_mode.h"
#include "autograd/record.h"

namespace kiln::graph {

void replace_uses(Graph& g, int from, int to) {
  for (auto& n : g.nodes)
    for (auto& v : n.inputs)
      if (v == from) v = to;
  for (auto& v : g.outputs)
    if (v == from) v = to;
}

void eliminate_dead_code(Graph& g) {
  std::vector<bool> live(g.values.size(), false);
  for (int v : g.outputs) live[v] = true;
  for (std::size_t i = g.nodes.size(); i-- > 0;) {
    if (!live[g.nodes[i].output]) continue;
    for (int v : g.nodes[i].inputs) live[v] = true;
  }
  std::vector<Node> kept;
  for (auto& n : g.nodes)
    if (live[n.output]) kept.push_back(std::move(n));
  g.nodes = std::move(kept);
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    g.values[g.nodes[i].output].producer = static_cast<int>(i);
  std::vector<Input> inputs;
  for (auto& in : g.inputs)
    if (in.kind == InputKind::argument || live[in.value]) inputs.push_back(std::move(in));
  g.inputs = std::move(inputs);
}

namespace {

std::string attrs_key(const Node& n) {
  const OpAttrs& a = n.attrs;
  std::uint64_t value_bits;
  std::memcpy(&value_bits, &a.value, sizeof value_bits);
  return fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", static_cast<int>(n.op),
                     fmt::join(n.inputs, ","), fmt::join(a.dims, ","), fmt::join(a.shape, ","),
                     fmt::join(n.shape_symbols, ","), a.keepdim, a.dim, a.start, a.end, a.step,
                     value_bits, static_cast<int>(a.dtype));
}

bool has_symbols(const Graph& g, const Node& n) {
  for (int s : n.shape_symbols)
    if (s >= 0) return true;
  for (int s : g.values[n.output].symbols)
    if (s != -1) return true;
  return false;
}

// The single value of a constant whose elements are all equal, if the value is such.
bool constant_equals(const Graph& g, int value, double expected) {
  const Input* in = g.input_of(value);
  if (!in || in->kind != InputKind::constant) return false;
  for (double v : in->tensor.to_vector<double>())
    if (v != expected) return false;
  return true;
}

// `to` can hold every value of `from` exactly, so casting there and back is the identity.
bool widens_exactly(DType from, DType to) {
  if (from == to) return true;
  switch (from) {
    case DType::bool_: return true;
    case DType::i32: return to == DType::i64 || to == DType::f64;
    case DType::f16:
    case DType::bf16: return to == DType::f32 || to == DType::f64;
    case DType::f32: return to == DType::f64;
    default: return false;
  }
}

// The value `n` reduces to without computing anything, or -1.
int identity_of(const Graph& g, const Node& n) {
  const TensorMeta& out = g.values[n.output].meta;
  auto same_meta = [&](int v) {
    const TensorMeta& m = g.values[v].meta;
    return m.shape == out.shape && m.dtype == out.dtype && g.values[v].symbols ==
                                                              g.values[n.output].symbols;
  };
  auto producer = [&](int v) -> const Node* {
    int p = g.values[v].producer;
    return p >= 0 ? &g.nodes[p] : nullptr;
  };
  switch (n.op) {
    case OpId::mul:
      if (constant_equals(g, n.inputs[1], 1.0) && same_meta(n.inputs[0])) return n.inputs[0];
      if (constant_equals(g, n.inputs[0], 1.0) && same_meta(n.inputs[1])) return n.inputs[1];
      break;
    case OpId::add:
      if (constant_equals(g, n.inputs[1], 0.0) && same_meta(n.inputs[0])) return n.inputs[0];
      if (constant_equals(g, n.inputs[0], 0.0) && same_meta(n.inputs[1])) return n.inputs[1];
      break;
    case OpId::sub:
      if (constant_equals(g, n.inputs[1], 0.0) && same_meta(n.inputs[0])) return n.inputs[0];
      break;
    case OpId::div:
      if (constant_equals(g, n.inputs[1], 1.0) && same_meta(n.inputs[0])) return n.inputs[0];
      break;
    case OpId::neg:
      if (const Node* p = producer(n.inputs[0]); p && p->op == OpId::neg) return p->inputs[0];
      break;
    case OpId::cast:
      if (same_meta(n.inputs[0])) return n.inputs[0];
      if (const Node* p = producer(n.inputs[0]); p && p->op == OpId::cast &&
                                                  same_meta(p->inputs[0]) &&
                                                  widens_exactly(out.dtype, p->attrs.dtype))
        return p->inputs[0];
      break;
    case OpId::reshape:
    case OpId::expand:
      if (same_meta(n.inputs[0])) return n.inputs[0];
      break;
    case OpId::permute: {
      bool identity = true;
      for (std::size_t i = 0; i < n.attrs.dims.size(); ++i)
        identity = identity && n.attrs.dims[i] == static_cast<std::int64_t>(i);
      if (identity) return n.inputs[0];
      break;
    }
    default: break;
  }
  return -1;
}

}  // namespace

void eliminate_common_subexpressions(Graph& g) {
  std::map<std::string, int> seen;
  for (auto& n : g.nodes) {
    auto [it, inserted] = seen.emplace(attrs_key(n), n.output);
    if (!inserted) replace_uses(g, n.output, it->second);
  }
  eliminate_dead_code(g);
}

void fold_constants(Graph& g) {
  NoGradGuard no_grad;
  int folded = 0;
  for (auto& n : g.nodes) {
    bool all_constant = !n.inputs.empty();
    for (int v : n.inputs) all_constant = all_constant && g.is_constant(v);
    if (!all_constant || has_symbols(g, n)) continue;
    // Folding a node that multiplies data (a big expand or pad) would store the big result.
    std::int64_t in_elems = 0;
    for (int v : n.inputs) in_elems += numel(g.values[v].meta.shape);
    std::int64_t out_elems = numel(g.values[n.output].meta.shape);
    if (out_elems > 4096 && out_elems > in_elems) continue;
    std::vector<Tensor> args;
    for (int v : n.inputs) args.push_back(g.input_of(v)->tensor);
    Tensor result = autograd::record(n.op, args, n.attrs);
    Input in;
    in.kind = InputKind::constant;
    in.tensor = result.is_contiguous() && !result.impl().is_view ? result : result.clone();
    in.name = fmt::format("folded{}", folded++);
    int v = g.add_input(std::move(in), g.values[n.output].meta);
    replace_uses(g, n.output, v);
  }
  eliminate_dead_code(g);
}

void simplify(Graph& g) {
  for (auto& n : g.nodes) {
    // Reshape of a reshape is one reshape of the original.
    if (n.op == OpId::reshape) {
      int p = g.values[n.inputs[0]].producer;
      if (p >= 0 && g.nodes[p].op == OpId::reshape) n.inputs[0] = g.nodes[p].inputs[0];
    }
    int same = identity_of(g, n);
    if (same >= 0) replace_uses(g, n.output, same);
  }
  eliminate_dead_code(g);
}

void optimize(Graph& g) {
  for (int round = 0; round < 4; ++round) {
    std::size_t before = g.nodes.size();
    simplify(g);
    fold_constants(g);
    eliminate_common_subexpressions(g);
    if (g.nodes.size() == before) break;
  }
}

}  // namespace kiln::graph
