// Algebraic simplification (see passes.h): implicit broadcasts made explicit are dropped, then
// local rules, one per identity, run to a fixed point through the rule driver.
#include <vector>

#include "graph/passes.h"
#include "graph/pattern.h"
#include "graph/rewrite.h"

namespace kiln::graph {
namespace {

// An expand that only elementwise ops read, each of which broadcasts another operand to the
// expand's full size anyway, is an implicit broadcast made explicit (a derivative rule's
// expand(grad)). Reading the small value directly is the same arithmetic, and lets a kernel
// that computes the small value (a row reduction) also compute its readers.
bool absorbed_by_readers(const Graph& g, const Readers& readers, int wide) {
  const auto& sizes = g.values[wide].sizes;
  if (readers.nodes(wide).empty() || readers.returned(wide)) return false;
  for (int r : readers.nodes(wide)) {
    const Node& reader = g.nodes[r];
    bool full_operand = false;
    for (int v : reader.inputs)
      full_operand = full_operand || (v != wide && g.values[v].sizes == sizes);
    if (!(op_class(reader.op) == OpClass::elementwise && reader.inputs.size() >= 2 &&
          full_operand && g.values[reader.output()].sizes == sizes &&
          g.values[reader.output()].meta.shape == g.values[wide].meta.shape))
      return false;
  }
  return true;
}

void drop_broadcast_expands(Graph& g) {
  const Readers readers(g);  // as the pass found the graph: each expand is judged on its own
  for (const Node& e : g.nodes) {
    if (e.op != OpId::expand || !e.grad) continue;
    const int wide = e.output(), small = e.inputs[0];
    if (!absorbed_by_readers(g, readers, wide)) continue;
    for (int r : readers.nodes(wide))
      for (int& v : g.nodes[r].inputs)
        if (v == wide) v = small;
  }
}

// A reshape read only by reductions, of a tree of elementwise ops that nothing else reads (the
// gradient of a repeated view, such as grouped-query k/v heads, reshaped so that its sum over
// the repeats is a reduction): the ops over reshaped operands instead. The reduction's kernel
// then computes them over its rows rather than reading a value another kernel wrote.
class ReshapeIntoReduction {
 public:
  explicit ReshapeIntoReduction(Graph& g) : g_(g), readers_(g) {}

  // Rewrites the first such reshape; false when there is none.
  bool apply_once() {
    for (std::size_t r = 0; r < g_.nodes.size(); ++r) {
      const Node& n = g_.nodes[r];
      if (n.op != OpId::reshape || !n.grad || !read_by_reductions(n.output())) continue;
      int v = n.inputs[0];
      if (!sinks(v, static_cast<int>(r), n.grad) ||
          !contiguous_leaves(v, static_cast<int>(r), n.grad))
        continue;
      at_ = static_cast<int>(r);
      Node reshape = n;
      int replacement = rebuilt(v, static_cast<int>(r), reshape);
      replace_all_uses(g_, g_.nodes[at_].output(), replacement);
      return true;
    }
    return false;
  }

 private:
  bool read_by_reductions(int v) const {
    if (readers_.returned(v) || readers_.nodes(v).empty()) return false;
    for (int r : readers_.nodes(v))
      if (op_class(g_.nodes[r].op) != OpClass::reduction) return false;
    return true;
  }

  // Whether `v` is made by an elementwise op that only `reader` reads, over operands of v's
  // sizes (or 0-dim).
  bool sinks(int v, int reader, bool grad) const {
    const Node* p = producer_of(g_, v);
    if (!p || op_class(p->op) != OpClass::elementwise || p->outputs.size() != 1 ||
        p->grad != grad || readers_.sole_reader(v) != reader)
      return false;
    for (int u : p->inputs)
      if (!g_.values[u].sizes.empty() && g_.values[u].sizes != g_.values[v].sizes) return false;
    return true;
  }

  // `v` reshaped as `reshape` does: its tree (read by `reader`) rebuilt over reshaped leaves,
  // inserted before the reshape, whose index at_ follows the insertions. A leaf must be
  // contiguous, so that its reshape is a view rather than a copy.
  int rebuilt(int v, int reader, const Node& reshape) {
    if (!sinks(v, reader, reshape.grad))
      return inserted(OpId::reshape, {v}, reshape.attrs, reshape);
    int p = g_.values[v].producer;
    Node op = g_.nodes[p];  // a copy: insertions move the vector
    std::vector<int> operands;
    for (int u : op.inputs)
      operands.push_back(g_.values[u].sizes.empty() ? u : rebuilt(u, p, reshape));
    return inserted(op.op, operands, op.attrs, op);
  }

  // Whether every leaf of the tree under `v` is contiguous.
  bool contiguous_leaves(int v, int reader, bool grad) const {
    if (!sinks(v, reader, grad)) return g_.values[v].strides == StrideClass::contiguous;
    int p = g_.values[v].producer;
    for (int u : g_.nodes[p].inputs)
      if (!g_.values[u].sizes.empty() && !contiguous_leaves(u, p, grad)) return false;
    return true;
  }

  int inserted(OpId op, std::vector<int> inputs, const OpAttrs& attrs, const Node& like) {
    int i = insert_op_before(g_, at_, op, std::move(inputs), attrs, like);
    ++at_;
    return g_.nodes[i].output();
  }

  Graph& g_;
  const Readers readers_;  // as the graph was before this rewrite's insertions
  int at_ = 0;
};

void reshapes_into_reductions(Graph& g) {
  for (int round = 0; round < 64 && ReshapeIntoReduction(g).apply_once(); ++round) {
  }
}

// A no_grad node is a stop-gradient even where it computes nothing.
bool simplifiable(const Node& n) {
  return n.outputs.size() == 1 && n.grad;
}

// Value `v` has the shape, dtype and size expressions of node `n`'s output.
bool same_meta(const Graph& g, const Node& n, int v) {
  const Value &m = g.values[v], &out = g.values[n.output()];
  return m.meta.shape == out.meta.shape && m.meta.dtype == out.meta.dtype && m.sizes == out.sizes;
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
    case DType::i8:  // 8 bits: every float type's significand holds them
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

bool is_identity_permutation(const std::vector<std::int64_t>& dims) {
  for (std::size_t i = 0; i < dims.size(); ++i)
    if (dims[i] != static_cast<std::int64_t>(i)) return false;
  return true;
}

Pattern node_of(OpId op, std::function<bool(const Graph&, const Node&)> when = nullptr,
                std::vector<Pattern> operands = {}) {
  auto gated = [when = std::move(when)](const Graph& g, const Node& n) {
    return simplifiable(n) && (!when || when(g, n));
  };
  return Pattern{op, std::move(gated), std::move(operands)};
}

const Node& operand_node(const Graph& g, const Node& n, int k = 0) {
  return g.nodes[g.values[n.inputs[k]].producer];
}

// Reshape of a reshape is one reshape of the original; permute of a permute one permute. Unless
// the first reshape copies (a permuted input): the second is then a view of the copy, where
// reshaping the original again would copy again.
Rule compose_views(std::string_view name, OpId op) {
  auto when = [](const Graph& g, const Node& n) {
    const Node& p = operand_node(g, n);
    bool copies = n.op == OpId::reshape && g.values[p.inputs[0]].strides == StrideClass::general;
    return p.grad == n.grad && !copies;
  };
  auto apply = [](Graph& g, int i) {
    Node& n = g.nodes[i];
    const Node& p = operand_node(g, n);
    if (n.op == OpId::permute) {
      std::vector<std::int64_t> composed;
      for (auto d : n.attrs.dims) composed.push_back(p.attrs.dims[d]);
      n.attrs.dims = std::move(composed);
    }
    n.inputs[0] = p.inputs[0];
    return true;
  };
  return Rule{name, node_of(op, when, {Pattern{op, nullptr, {}}}), apply};
}

// x op c == x where c is a constant `unit` on side `at` (0 or 1) and x already has the shape.
Rule unit_operand(std::string_view name, OpId op, double unit, int at) {
  return replace_by(name, node_of(op), [unit, at](const Graph& g, const Node& n) {
    int other = n.inputs[1 - at];
    return constant_equals(g, n.inputs[at], unit) && same_meta(g, n, other) ? other : -1;
  });
}

// The node's operand when it already has the output's shape, dtype and sizes.
Rule same_meta_operand(std::string_view name, OpId op,
                       std::function<bool(const Node&)> also = nullptr) {
  return replace_by(name, node_of(op), [also](const Graph& g, const Node& n) {
    return (!also || also(n)) && same_meta(g, n, n.inputs[0]) ? n.inputs[0] : -1;
  });
}

std::vector<Rule> make_rules() {
  std::vector<Rule> rules;
  rules.push_back(compose_views("reshape_of_reshape", OpId::reshape));
  rules.push_back(compose_views("permute_of_permute", OpId::permute));
  rules.push_back(unit_operand("mul_by_one", OpId::mul, 1.0, 1));
  rules.push_back(unit_operand("one_mul", OpId::mul, 1.0, 0));
  rules.push_back(unit_operand("add_zero", OpId::add, 0.0, 1));
  rules.push_back(unit_operand("zero_add", OpId::add, 0.0, 0));
  rules.push_back(unit_operand("sub_zero", OpId::sub, 0.0, 1));
  rules.push_back(unit_operand("div_by_one", OpId::div, 1.0, 1));
  rules.push_back(replace_by(
      "neg_neg",
      node_of(OpId::neg,
              [](const Graph& g, const Node& n) { return operand_node(g, n).grad == n.grad; },
              {Pattern{OpId::neg, nullptr, {}}}),
      [](const Graph& g, const Node& n) { return operand_node(g, n).inputs[0]; }));
  rules.push_back(same_meta_operand("cast_to_own_dtype", OpId::cast));
  // A round trip through a dtype that holds every value exactly.
  rules.push_back(replace_by(
      "cast_round_trip", node_of(OpId::cast, nullptr, {Pattern{OpId::cast, nullptr, {}}}),
      [](const Graph& g, const Node& n) {
        const Node& p = operand_node(g, n);
        bool exact = p.grad == n.grad && same_meta(g, n, p.inputs[0]) &&
                     widens_exactly(g.values[n.output()].meta.dtype, p.attrs.dtype);
        return exact ? p.inputs[0] : -1;
      }));
  rules.push_back(same_meta_operand("reshape_to_own_shape", OpId::reshape));
  rules.push_back(same_meta_operand("expand_to_own_shape", OpId::expand));
  // A pad of zero on every side: a backward's slice of the whole tensor.
  rules.push_back(same_meta_operand("pad_of_nothing", OpId::pad, [](const Node& n) {
    for (auto amount : n.attrs.dims)
      if (amount != 0) return false;
    return true;
  }));
  rules.push_back(
      replace_by("identity_permute", node_of(OpId::permute), [](const Graph&, const Node& n) {
        return is_identity_permutation(n.attrs.dims) ? n.inputs[0] : -1;
      }));
  return rules;
}

}  // namespace

void simplify(Graph& g) {
  static const std::vector<Rule> rules = make_rules();
  drop_broadcast_expands(g);
  rewrite_to_fixed_point(g, rules);
  reshapes_into_reductions(g);
}

}  // namespace kiln::graph
