// Dead code, common subexpressions, constant folding, and the transposed matmul results.
#include "graph/passes.h"

#include <algorithm>
#include <unordered_map>

#include "graph/rewrite.h"
#include "runtime/dispatch.h"

namespace kiln::graph {

void eliminate_dead_code(Graph& g) {
  std::vector<bool> live(g.values.size(), false);
  for (int v : g.outputs) live[v] = true;
  std::vector<int> dead;
  for (std::size_t i = g.nodes.size(); i-- > 0;) {
    bool keep = false;
    for (int v : g.nodes[i].outputs) keep = keep || live[v];
    if (!keep) {
      dead.push_back(static_cast<int>(i));
      continue;
    }
    for (int v : g.nodes[i].inputs) live[v] = true;
    for (int v : g.mutated_inputs) live[v] = true;  // written back: the call needs the input
  }
  erase_nodes(g, dead);
  std::vector<Input> inputs;
  for (auto& in : g.inputs)
    if (in.kind == InputKind::argument || live[in.value]) inputs.push_back(std::move(in));
  g.inputs = std::move(inputs);
}

namespace {

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

bool has_symbols(const Graph& g, const Node& n) {
  if (!n.attrs.shape_exprs.empty()) return true;
  for (int v : n.outputs)
    if (g.values[v].is_symbolic()) return true;
  return false;
}

// Whether node `n` reads constants only and is worth evaluating now: folding a node that
// multiplies data (a big expand or pad) would store the big result.
bool foldable(const Graph& g, const Node& n) {
  if (is_random(n.op)) return false;  // its seed and offset are read per call, never constant
  bool all_constant = !n.inputs.empty();
  for (int v : n.inputs) all_constant = all_constant && g.is_constant(v);
  if (!all_constant || has_symbols(g, n)) return false;
  std::int64_t in_elems = 0, out_elems = 0;
  for (int v : n.inputs) in_elems += numel(g.values[v].meta.shape);
  for (int v : n.outputs) out_elems += numel(g.values[v].meta.shape);
  return !(out_elems > 4096 && out_elems > in_elems);
}

}  // namespace

void eliminate_common_subexpressions(Graph& g) {
  std::unordered_map<NodeKey, const Node*, NodeKeyHash, NodeKeyEqual> seen;
  for (auto& n : g.nodes) {
    if (is_random(n.op)) continue;  // two draws are two draws, even of the same numbers
    auto [it, inserted] = seen.emplace(NodeKey{&n}, &n);
    if (inserted) continue;
    for (std::size_t k = 0; k < n.outputs.size(); ++k)
      replace_all_uses(g, n.outputs[k], it->second->outputs[k]);
  }
}

void fold_constants(Graph& g) {
  int folded = 0;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!foldable(g, n)) continue;
    std::vector<Tensor> args;
    for (int v : n.inputs) args.push_back(g.input_of(v)->tensor);
    std::vector<Tensor> results = dispatch(n.op, args, n.attrs);
    // A strided view on a device would need a copy kernel to be stored (the backend's copies are
    // contiguous); left as it is, it is a view of a constant, which costs nothing.
    if (std::any_of(results.begin(), results.end(), [](const Tensor& r) {
          return !r.device().is_cpu() && !(r.is_contiguous() && !r.impl().is_view);
        }))
      continue;
    std::vector<int> outputs = n.outputs;  // add_input below may reallocate g.nodes' values
    for (std::size_t k = 0; k < outputs.size(); ++k) {
      Input in;
      in.kind = InputKind::constant;
      const Tensor& r = results[k];
      in.tensor = r.is_contiguous() && !r.impl().is_view ? r : transfer(r, r.device());
      in.name = fmt::format("folded{}", folded++);
      int v = g.add_input(std::move(in), g.values[outputs[k]].meta);
      g.values[v].device = g.values[outputs[k]].device;
      replace_all_uses(g, outputs[k], v);
    }
  }
}

namespace {

// The permutes that transpose_matmul_results folds into their matmul: (the product, its
// transpose), as values, which name the same thing while nodes move.
std::vector<std::pair<int, int>> transposed_products(const Graph& g) {
  const Readers readers(g);
  std::vector<std::pair<int, int>> found;
  for (const Node& n : g.nodes) {
    if (n.op != OpId::permute || !swaps_last_two(n.attrs.dims)) continue;
    const Node* mm = producer_of(g, n.inputs[0]);
    if (!mm || mm->op != OpId::matmul || readers.sole_reader(n.inputs[0]) < 0) continue;
    if (mm->grad != n.grad || mm->checkpoint != n.checkpoint ||
        g.values[mm->inputs[0]].meta.shape.size() < 2 ||
        g.values[mm->inputs[1]].meta.shape.size() < 2)
      continue;
    found.emplace_back(n.inputs[0], n.output());
  }
  // In the order of the products (new values are numbered in that order).
  std::sort(found.begin(), found.end(), [&](auto x, auto y) {
    return g.values[x.first].producer < g.values[y.first].producer;
  });
  return found;
}

// Inserts the transpose of operand `v` (a host view) before the node making `product`.
int insert_transpose(Graph& g, int product, int v) {
  const Node& mm = g.nodes[g.values[product].producer];
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
  int at = insert_before(g, g.values[product].producer, std::move(permute), {std::move(t)});
  return g.nodes[at].output();
}

}  // namespace

void transpose_matmul_results(Graph& g) {
  for (auto [product, result] : transposed_products(g)) {
    int a = g.nodes[g.values[product].producer].inputs[0];
    int b = g.nodes[g.values[product].producer].inputs[1];
    int tb = insert_transpose(g, product, b);
    int ta = insert_transpose(g, product, a);
    int m = g.values[product].producer;
    int permute = g.values[result].producer;
    g.nodes[m].inputs = {tb, ta};
    // The product takes over the permute's value: its readers need not change.
    rebind_output(g, m, 0, result);
    g.values[result].strides = StrideClass::contiguous;
    erase_nodes(g, std::span<const int>(&permute, 1));
  }
}

}  // namespace kiln::graph
