// Writing attention outputs where their readers want them (see output_placement.h).
#include "jit/output_placement.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "graph/rewrite.h"
#include "jit/codegen/attention.h"
#include "runtime/factories.h"

namespace kiln::jit {
namespace {

std::vector<std::int64_t> inverse(const std::vector<std::int64_t>& perm) {
  std::vector<std::int64_t> inv(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<std::int64_t>(i);
  return inv;
}

Shape permuted(const Shape& shape, const std::vector<std::int64_t>& perm) {
  Shape out;
  for (auto d : perm) out.push_back(shape[d]);
  return out;
}

// An empty tensor laid out as `shape` permuted by `perm`, seen with the dims of `shape`: what the
// permute reading it then sees as contiguous.
Tensor permuted_empty(const Shape& shape, const std::vector<std::int64_t>& perm, DType dtype) {
  if (perm.empty()) return empty(shape, dtype, Device::cuda());
  return empty(permuted(shape, perm), dtype, Device::cuda()).permute(inverse(perm));
}

// The permute that reads `value` and nothing else does, or -1.
int only_permute_reader(const graph::Graph& g, const graph::Readers& readers, int value) {
  int r = readers.sole_reader(value);
  return r >= 0 && g.nodes[r].op == OpId::permute ? r : -1;
}

std::optional<OutputPlacement> plan_forward(const graph::Graph& g, const graph::Readers& readers,
                                            int node) {
  const graph::Node& n = g.nodes[node];
  // Any permute reading o: the others (the backward's saved o, say) read it through strides.
  for (int r : readers.nodes(n.outputs[0]))
    if (g.nodes[r].op == OpId::permute) {
      OutputPlacement p;
      p.node = node;
      p.perms = {g.nodes[r].attrs.dims, {}};
      return p;
    }
  return std::nullopt;
}

std::optional<OutputPlacement> plan_backward(const graph::Graph& g, const graph::Readers& readers,
                                             int node) {
  const graph::Node& n = g.nodes[node];
  OutputPlacement p;
  p.node = node;
  for (int out : n.outputs) {
    int permute = only_permute_reader(g, readers, out);
    if (permute < 0) return std::nullopt;
    int moved = g.nodes[permute].output();
    int joined_by = readers.sole_reader(moved);
    if (joined_by < 0) return std::nullopt;
    const graph::Node& cat = g.nodes[joined_by];
    if (cat.op != OpId::cat || cat.inputs.size() != n.outputs.size() || cat.attrs.dim < 0)
      return std::nullopt;
    if (p.cat_node >= 0 && p.cat_node != joined_by) return std::nullopt;
    p.cat_node = joined_by;
    p.cat_dim = cat.attrs.dim;
    int position = -1;
    for (std::size_t i = 0; i < cat.inputs.size(); ++i)
      if (cat.inputs[i] == moved) position = static_cast<int>(i);
    p.perms.push_back(g.nodes[permute].attrs.dims);
    p.cat_position.push_back(position);
  }
  return p;
}

}  // namespace

std::string OutputPlacement::str(const graph::Graph& g) const {
  const graph::Node& n = g.nodes[node];
  if (cat_node < 0)
    return fmt::format("{} writes %{} in the layout its permute(dims={}) reads", n.op, n.outputs[0],
                       perms[0]);
  return fmt::format(
      "{} writes its gradients into the slices of cat %{} (dim {}), which is not "
      "launched",
      n.op, g.nodes[cat_node].output(), cat_dim);
}

std::optional<OutputPlacement> plan_output_placement(const graph::Graph& g, int node) {
  const graph::Node& n = g.nodes[node];
  if (n.op != OpId::attention && n.op != OpId::attention_backward) return std::nullopt;
  const graph::Readers readers(g);
  return n.op == OpId::attention ? plan_forward(g, readers, node) : plan_backward(g, readers, node);
}

std::optional<PlacedOutputs> run_placed(const graph::Graph& g, const OutputPlacement& placement,
                                        std::span<const Tensor> operands, const OpAttrs& attrs,
                                        std::span<const Shape> output_shapes) {
  OpId op = g.nodes[placement.node].op;
  codegen::AttentionCall call = codegen::attention_call(op, operands, attrs);
  if (!codegen::attention_unsupported(call).empty()) return std::nullopt;
  DType dtype = call.q.dtype();
  PlacedOutputs r;
  if (op == OpId::attention) {
    auto fwd = codegen::attention_forward(
        call, permuted_empty(output_shapes[0], placement.perms[0], dtype));
    r.outputs = {fwd.out, fwd.lse};
    return r;
  }
  // A gradient summed over broadcast batch dims is a new tensor: it cannot be placed.
  const Tensor* operand[] = {&call.q, &call.k, &call.v};
  for (int i = 0; i < 3; ++i)
    if (operand[i]->shape() != output_shapes[i]) return std::nullopt;
  // The joined shape: the permuted gradients side by side along the cat's dim, in its order.
  std::vector<Shape> pieces(3);
  for (int i = 0; i < 3; ++i)
    pieces[placement.cat_position[i]] = permuted(output_shapes[i], placement.perms[i]);
  Shape joined_shape = pieces[0];
  auto dim = static_cast<std::size_t>(placement.cat_dim);
  joined_shape[dim] = 0;
  std::vector<std::int64_t> offsets;
  for (const Shape& piece : pieces) {
    offsets.push_back(joined_shape[dim]);
    joined_shape[dim] += piece[dim];
  }
  r.joined = empty(joined_shape, dtype, Device::cuda());
  std::optional<Tensor> into[3];
  for (int i = 0; i < 3; ++i) {
    int at = placement.cat_position[i];
    Tensor slice = r.joined.slice(placement.cat_dim, offsets[at], offsets[at] + pieces[at][dim]);
    into[i] = slice.permute(inverse(placement.perms[i]));
  }
  auto grads = codegen::attention_backward(call, operands[3], operands[4], operands[5],
                                           {into[0], into[1], into[2]});
  r.outputs = {grads.dq, grads.dk, grads.dv};
  return r;
}

}  // namespace kiln::jit
