// Attaching autograd nodes to op outputs.
#include "autograd/record.h"

#include "autograd/grad_mode.h"
#include "runtime/dispatch.h"
#include "runtime/trace_hooks.h"

namespace kiln::autograd {

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  for (const auto& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

namespace {

void attach(Tensor& output, std::shared_ptr<Node> node, const std::vector<Tensor>& inputs) {
  std::vector<Edge> edges;
  for (const auto& t : inputs) edges.push_back(t.defined() ? gradient_edge(t) : Edge{});
  node->set_next_edges(std::move(edges));
  TensorImpl& impl = output.impl();
  impl.grad_fn = std::move(node);
  impl.output_nr = 0;
  impl.requires_grad = true;
}

// A backend or composite may hand back one of its inputs unchanged; history must then go on a
// fresh alias, never on the input itself.
Tensor unaliased(const Tensor& out, const std::vector<Tensor>& inputs) {
  bool aliased = out.grad_fn() != nullptr;
  for (const auto& t : inputs) aliased = aliased || out.same(t);
  return aliased ? make_view(out, out.shape(), out.strides(), out.offset()) : out;
}

}  // namespace

Tensor record(OpId op, std::vector<Tensor> inputs, const OpAttrs& attrs) {
  KILN_OP_SCOPE;
  Tensor out = dispatch1(op, inputs, attrs);
  if (!grad_enabled() || !is_differentiable(op) || !is_floating(out.dtype()) ||
      !any_requires_grad(inputs))
    return out;
  out = unaliased(out, inputs);
  attach(out, std::make_shared<OpNode>(op, attrs, inputs), inputs);
  return out;
}

Tensor record_function(Tensor output, std::string name, const std::vector<Tensor>& inputs,
                       FunctionNode::Backward rule) {
  KILN_OP_SCOPE;
  if (!grad_enabled() || !any_requires_grad(inputs) || !is_floating(output.dtype()))
    return output;
  output = unaliased(output, inputs);
  attach(output, std::make_shared<FunctionNode>(std::move(name), std::move(rule)), inputs);
  return output;
}

}  // namespace kiln::autograd
