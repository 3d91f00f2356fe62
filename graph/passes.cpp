// DCE, CSE, constant folding and algebraic simplification.
#include "graph/passes.h"

#include <unordered_map>

#include "runtime/dispatch.h"

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
  std::vector<bool> keep(g.nodes.size(), false);
  for (std::size_t i = g.nodes.size(); i-- > 0;) {
    for (int v : g.nodes[i].outputs) keep[i] = keep[i] || live[v];
    if (!keep[i]) continue;
    for (int v : g.nodes[i].inputs) live[v] = true;
  }
  std::vector<Node> kept;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (keep[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  // Values of removed nodes stay in `values` (ids are stable) but no longer name a producer:
  // an index into the shorter node list would be another node, or none.
  for (auto& v : g.values) v.producer = -1;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (int v : g.nodes[i].outputs) g.values[v].producer = static_cast<int>(i);
  std::vector<Input> inputs;
  for (auto& in : g.inputs)
    if (in.kind == InputKind::argument || live[in.value]) inputs.push_back(std::move(in));
  g.inputs = std::move(inputs);
}

namespace {

bool has_symbols(const Graph& g, const Node& n) {
  if (!n.attrs.shape_exprs.empty()) return true;
  for (int v : n.outputs)
    if (g.values[v].is_symbolic()) return true;
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
    case DType::bool_:
      return true;
    case DType::i32:
      return to == DType::i64 || to == DType::f64;
    case DType::f16:
    case DType::bf16:
      return to == DType::f32 || to == DType::f64;
    case DType::f32:
      return to == DType::f64;
    default:
      return false;
  }
}

// The value single-output node `n` reduces to without computing anything, or -1.
int identity_of(const Graph& g, const Node& n) {
  const Value& out = g.values[n.output()];
  auto same_meta = [&](int v) {
    const Value& m = g.values[v];
    return m.meta.shape == out.meta.shape && m.meta.dtype == out.meta.dtype && m.sizes == out.sizes;
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
      if (const Node* p = producer(n.inputs[0]); p && p->op == OpId::neg && p->grad == n.grad)
        return p->inputs[0];
      break;
    case OpId::cast:
      if (same_meta(n.inputs[0])) return n.inputs[0];
      if (const Node* p = producer(n.inputs[0]); p && p->op == OpId::cast && p->grad == n.grad &&
                                                 same_meta(p->inputs[0]) &&
                                                 widens_exactly(out.meta.dtype, p->attrs.dtype))
        return p->inputs[0];
      break;
    case OpId::reshape:
    case OpId::expand:
      if (same_meta(n.inputs[0])) return n.inputs[0];
      break;
    case OpId::pad: {
      bool none = true;  // a pad of zero on every side: a backward's slice of the whole tensor
      for (auto amount : n.attrs.dims) none = none && amount == 0;
      if (none && same_meta(n.inputs[0])) return n.inputs[0];
      break;
    }
    case OpId::permute: {
      bool identity = true;
      for (std::size_t i = 0; i < n.attrs.dims.size(); ++i)
        identity = identity && n.attrs.dims[i] == static_cast<std::int64_t>(i);
      if (identity) return n.inputs[0];
      break;
    }
    // Nothing to simplify
    case OpId::exp:
    case OpId::log:
    case OpId::log1p:
    case OpId::expm1:
    case OpId::sqrt:
    case OpId::rsqrt:
    case OpId::reciprocal:
    case OpId::sin:
    case OpId::cos:
    case OpId::tanh:
    case OpId::sigmoid:
    case OpId::gelu:
    case OpId::gelu_tanh:
    case OpId::silu:
    case OpId::erf:
    case OpId::softplus:
    case OpId::abs:
    case OpId::relu:
    case OpId::sign:
    case OpId::floor:
    case OpId::ceil:
    case OpId::round:
    case OpId::trunc:
    case OpId::logical_not:
    case OpId::tril:
    case OpId::triu:
    case OpId::pow:
    case OpId::maximum:
    case OpId::minimum:
    case OpId::remainder:
    case OpId::floor_divide:
    case OpId::eq:
    case OpId::ne:
    case OpId::lt:
    case OpId::le:
    case OpId::gt:
    case OpId::ge:
    case OpId::logical_and:
    case OpId::logical_or:
    case OpId::where:
    case OpId::copy:
    case OpId::sum:
    case OpId::prod:
    case OpId::amax:
    case OpId::amin:
    case OpId::argmax:
    case OpId::argmin:
    case OpId::max_dim:
    case OpId::min_dim:
    case OpId::cumsum:
    case OpId::softmax:
    case OpId::log_softmax:
    case OpId::slice:
    case OpId::detach:
    case OpId::gather:
    case OpId::index_select:
    case OpId::scatter_add:
    case OpId::index_add:
    case OpId::matmul:
    case OpId::cat:
    case OpId::to_device:
    case OpId::attention:
    case OpId::attention_backward:
      break;
  }
  return -1;
}

struct NodeKey {
  const Node* node;
};
struct NodeKeyHash {
  std::size_t operator()(const NodeKey& k) const {
    std::size_t h = attrs_hash(k.node->op, k.node->attrs) * 31 + k.node->grad;
    for (int v : k.node->inputs) h = h * 1000003 + static_cast<std::size_t>(v);
    return h;
  }
};
struct NodeKeyEqual {
  bool operator()(const NodeKey& a, const NodeKey& b) const {
    return a.node->op == b.node->op && a.node->grad == b.node->grad &&
           a.node->inputs == b.node->inputs &&
           attrs_equal(a.node->op, a.node->attrs, b.node->attrs);
  }
};

}  // namespace

void eliminate_common_subexpressions(Graph& g) {
  std::unordered_map<NodeKey, const Node*, NodeKeyHash, NodeKeyEqual> seen;
  for (auto& n : g.nodes) {
    auto [it, inserted] = seen.emplace(NodeKey{&n}, &n);
    if (inserted) continue;
    for (std::size_t k = 0; k < n.outputs.size(); ++k)
      replace_uses(g, n.outputs[k], it->second->outputs[k]);
  }
  eliminate_dead_code(g);
}

void fold_constants(Graph& g) {
  int folded = 0;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    bool all_constant = !n.inputs.empty();
    for (int v : n.inputs) all_constant = all_constant && g.is_constant(v);
    if (!all_constant || has_symbols(g, n)) continue;
    // Folding a node that multiplies data (a big expand or pad) would store the big result.
    std::int64_t in_elems = 0, out_elems = 0;
    for (int v : n.inputs) in_elems += numel(g.values[v].meta.shape);
    for (int v : n.outputs) out_elems += numel(g.values[v].meta.shape);
    if (out_elems > 4096 && out_elems > in_elems) continue;
    std::vector<Tensor> args;
    for (int v : n.inputs) args.push_back(g.input_of(v)->tensor);
    std::vector<Tensor> results = dispatch(n.op, args, n.attrs);
    std::vector<int> outputs = n.outputs;  // add_input below may reallocate g.nodes' values
    for (std::size_t k = 0; k < outputs.size(); ++k) {
      Input in;
      in.kind = InputKind::constant;
      const Tensor& r = results[k];
      in.tensor = r.is_contiguous() && !r.impl().is_view ? r : transfer(r, r.device());
      in.name = fmt::format("folded{}", folded++);
      int v = g.add_input(std::move(in), g.values[outputs[k]].meta);
      g.values[v].device = g.values[outputs[k]].device;
      replace_uses(g, outputs[k], v);
    }
  }
  eliminate_dead_code(g);
}

namespace {

// An expand that only elementwise ops read, each of which broadcasts another operand to the
// expand's full size anyway, is an implicit broadcast made explicit (a derivative rule's
// expand(grad)). Reading the small value directly is the same arithmetic, and lets a kernel
// that computes the small value (a row reduction) also compute its readers.
void drop_broadcast_expands(Graph& g) {
  std::vector<std::vector<int>> readers(g.values.size());
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (int v : g.nodes[i].inputs) readers[v].push_back(static_cast<int>(i));
  for (int v : g.outputs) readers[v].push_back(-1);
  for (const Node& e : g.nodes) {
    if (e.op != OpId::expand || !e.grad) continue;
    const int wide = e.output(), small = e.inputs[0];
    const auto& sizes = g.values[wide].sizes;
    bool absorbed = !readers[wide].empty();
    for (int r : readers[wide]) {
      if (!absorbed) break;
      if (r < 0) {
        absorbed = false;
        break;
      }
      const Node& reader = g.nodes[r];
      bool full_operand = false;
      for (int v : reader.inputs)
        full_operand = full_operand || (v != wide && g.values[v].sizes == sizes);
      absorbed = op_class(reader.op) == OpClass::elementwise && reader.inputs.size() >= 2 &&
                 full_operand && g.values[reader.output()].sizes == sizes &&
                 g.values[reader.output()].meta.shape == g.values[wide].meta.shape;
    }
    if (!absorbed) continue;
    for (int r : readers[wide])
      for (int& v : g.nodes[r].inputs)
        if (v == wide) v = small;
  }
}

}  // namespace

void simplify(Graph& g) {
  drop_broadcast_expands(g);
  for (auto& n : g.nodes) {
    // A no_grad node is a stop-gradient even where it computes nothing.
    if (n.outputs.size() != 1 || !n.grad) continue;
    // Reshape of a reshape is one reshape of the original; permute of a permute one permute.
    if (n.op == OpId::reshape || n.op == OpId::permute) {
      int p = g.values[n.inputs[0]].producer;
      // Unless the first reshape copies (a permuted input): the second is then a view of the
      // copy, where reshaping the original again would copy again.
      bool copies = n.op == OpId::reshape && p >= 0 &&
                    g.values[g.nodes[p].inputs[0]].strides == StrideClass::general;
      if (p >= 0 && g.nodes[p].op == n.op && g.nodes[p].grad == n.grad && !copies) {
        if (n.op == OpId::permute) {
          std::vector<std::int64_t> composed;
          for (auto d : n.attrs.dims) composed.push_back(g.nodes[p].attrs.dims[d]);
          n.attrs.dims = std::move(composed);
        }
        n.inputs[0] = g.nodes[p].inputs[0];
      }
    }
    int same = identity_of(g, n);
    if (same >= 0) replace_uses(g, n.output(), same);
  }
  eliminate_dead_code(g);
}

void optimize(Graph& g) {
  for (int round = 0; round < 4; ++round) {
    std::size_t before = g.nodes.size();
    simplify(g);
    pads_to_cat(g);
    cat_before_reshape(g);
    fold_constants(g);
    eliminate_common_subexpressions(g);
    if (g.nodes.size() == before) break;
  }
}

void transpose_matmul_results(Graph& g) {
  std::vector<int> readers(g.values.size(), 0);
  for (const auto& n : g.nodes)
    for (int v : n.inputs) ++readers[v];
  for (int v : g.outputs) ++readers[v];
  std::vector<int> permute_of(g.nodes.size(), -1);  // matmul node -> the permute of its result
  std::vector<bool> dropped(g.nodes.size(), false);
  bool any = false;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.op != OpId::permute || !swaps_last_two(n.attrs.dims)) continue;
    int m = g.values[n.inputs[0]].producer;
    if (m < 0 || g.nodes[m].op != OpId::matmul || readers[n.inputs[0]] != 1) continue;
    const Node& mm = g.nodes[m];
    if (mm.grad != n.grad || mm.checkpoint != n.checkpoint ||
        g.values[mm.inputs[0]].meta.shape.size() < 2 ||
        g.values[mm.inputs[1]].meta.shape.size() < 2)
      continue;
    permute_of[m] = static_cast<int>(i);
    dropped[i] = any = true;
  }
  if (!any) return;
  std::vector<Node> nodes;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    if (dropped[i]) continue;
    if (permute_of[i] < 0) {
      nodes.push_back(std::move(g.nodes[i]));
      continue;
    }
    const Node& mm = g.nodes[i];
    // The transpose of operand `v`, a host view.
    auto transposed = [&](int v) {
      Value t = g.values[v];
      std::size_t rank = t.meta.shape.size();
      Node permute;
      permute.op = OpId::permute;
      permute.attrs.dims = last_two_swapped(rank);
      permute.inputs = {v};
      permute.grad = mm.grad;
      permute.checkpoint = mm.checkpoint;
      std::swap(t.meta.shape[rank - 1], t.meta.shape[rank - 2]);
      std::swap(t.sizes[rank - 1], t.sizes[rank - 2]);
      t.strides = output_strides(OpId::permute, permute.attrs, t.strides);
      t.producer = static_cast<int>(nodes.size());
      t.output_index = 0;
      g.values.push_back(std::move(t));
      int id = static_cast<int>(g.values.size()) - 1;
      permute.outputs = {id};
      nodes.push_back(std::move(permute));
      return id;
    };
    int tb = transposed(mm.inputs[1]);
    int ta = transposed(mm.inputs[0]);
    Node product = mm;
    product.inputs = {tb, ta};
    product.outputs = {g.nodes[permute_of[i]].output()};
    g.values[product.output()].strides = StrideClass::contiguous;
    nodes.push_back(std::move(product));
  }
  g.nodes = std::move(nodes);
  eliminate_dead_code(g);  // drops the old product's value and renumbers producers
}

}  // namespace kiln::graph
