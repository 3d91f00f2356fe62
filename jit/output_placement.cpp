// Writing attention outputs where their readers want them (see output_placement.h).
#include "jit/output_placement.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "graph/rewrite.h"
#include "jit/codegen/attention.h"
#include "jit/plan_build.h"
#include "runtime/attention_heads.h"
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

// The dims of the permute every reader of `value` is (all the same), or empty.
std::vector<std::int64_t> sole_permute(const graph::Graph& g, const graph::Readers& readers,
                                       int value) {
  std::vector<std::int64_t> dims;
  if (readers.returned(value) || readers.nodes(value).empty()) return {};
  for (int r : readers.nodes(value)) {
    const graph::Node& n = g.nodes[r];
    if (n.op != OpId::permute || (!dims.empty() && n.attrs.dims != dims)) return {};
    dims = n.attrs.dims;
  }
  return dims;
}

bool is_identity(const std::vector<std::int64_t>& perm) {
  for (std::size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<std::int64_t>(i)) return false;
  return true;
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

// The gradients written into the slices of the cat that joins them through permutes.
std::optional<OutputPlacement> plan_joined(const graph::Graph& g, const graph::Readers& readers,
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

// The walk order that writes `step`'s outputs as their permute reads them, or empty.
std::vector<std::int64_t> kernel_order(const graph::Graph& g, const graph::Readers& readers,
                                       const KernelStep& step) {
  const codegen::PointwiseKernel* p = step.kernel.pointwise();
  // A kernel reading its element's position depends on the walk order.
  if (!p || p->position || p->writes.empty()) return {};
  const std::size_t rank = step.domain.size();
  if (p->rank != static_cast<int>(rank)) return {};
  std::vector<std::int64_t> order;
  for (int w : p->writes) {
    if (g.values[w].sizes.size() != rank) return {};
    std::vector<std::int64_t> dims = sole_permute(g, readers, w);
    if (dims.empty() || (!order.empty() && dims != order)) return {};
    order = std::move(dims);
  }
  // The last dim stays last: the kernel's vector path and its broadcast reads were rendered
  // for it.
  if (rank < 2 || is_identity(order) || order.back() != static_cast<std::int64_t>(rank) - 1)
    return {};
  return order;
}

// Joined by one cat, or else each in the layout of the permute that reads it, where one does.
std::optional<OutputPlacement> plan_backward(const graph::Graph& g, const graph::Readers& readers,
                                             int node) {
  if (auto joined = plan_joined(g, readers, node)) return joined;
  OutputPlacement p;
  p.node = node;
  bool any = false;
  for (int out : g.nodes[node].outputs) {
    p.perms.push_back(sole_permute(g, readers, out));
    any |= !p.perms.back().empty();
  }
  if (!any) return std::nullopt;
  return p;
}

}  // namespace

namespace plan_build {

void place_kernel_outputs(const graph::Graph& g, const graph::Partition& partition,
                          std::vector<PlanStep>& steps, std::vector<std::string>& log) {
  const graph::Readers readers(g);
  for (PlanStep& step : steps) {
    auto* k = std::get_if<KernelStep>(&step.action);
    if (!k) continue;
    k->order = kernel_order(g, readers, *k);
    if (k->order.empty()) continue;
    // An index-aware kernel stores each element at its place in the walk: rendered for it.
    if (k->kernel.pointwise()->indexed)
      k->kernel = codegen::GroupKernel(g, partition.groups[static_cast<std::size_t>(step.group)],
                                       k->order);
    step.note +=
        fmt::format(" [walks its domain in the order {}: writes for its permute]", k->order);
    log.push_back(
        fmt::format("kiln: fusion: '{}' kernel {} writes its outputs in the layout of "
                    "permute(dims={}), which then needs no copy",
                    g.name, k->kernel.name(), k->order));
  }
}

}  // namespace plan_build

std::string OutputPlacement::str(const graph::Graph& g) const {
  const graph::Node& n = g.nodes[node];
  if (n.op == OpId::attention)
    return fmt::format("{} writes %{} in the layout its permute(dims={}) reads", n.op, n.outputs[0],
                       perms[0]);
  if (cat_node < 0) {
    std::vector<std::string> placed;
    for (std::size_t i = 0; i < perms.size(); ++i)
      if (!perms[i].empty()) placed.push_back(fmt::format("%{}", n.outputs[i]));
    return fmt::format("{} writes {} in the layouts of the permutes that read them", n.op,
                       fmt::join(placed, ", "));
  }
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

namespace {

// Whether `x` (q, k or v of `call`) has size 1 in a batch dim before the heads that another of
// them has larger: its gradient is then a sum over that dim, made apart (grouped-query heads
// are not such a dim).
bool broadcasts_batch(const Tensor& x, const codegen::AttentionCall& call) {
  for (const Tensor* other : {&call.q, &call.k, &call.v}) {
    if (other->dim() != x.dim()) return true;
    for (std::int64_t d = 0; d + 3 < x.dim(); ++d)
      if (x.shape()[d] != other->shape()[d]) return true;
  }
  return false;
}

}  // namespace

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
  if (placement.cat_node < 0) {
    std::optional<Tensor> into[3];
    for (int i = 0; i < 3; ++i)
      if (!placement.perms[i].empty() && operand[i]->shape() == output_shapes[i] &&
          !broadcasts_batch(*operand[i], call))
        into[i] = permuted_empty(output_shapes[i], placement.perms[i], operand[i]->dtype());
    auto grads = codegen::attention_backward(call, operands[3], operands[4], operands[5],
                                             {into[0], into[1], into[2]});
    r.outputs = {grads.dq, grads.dk, grads.dv};
    return r;
  }
  for (int i = 0; i < 3; ++i)
    if (operand[i]->shape() != output_shapes[i] || broadcasts_batch(*operand[i], call))
      return std::nullopt;
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
