// Attaching autograd nodes to op outputs.
#include "autograd/record.h"

#include "runtime/dispatch.h"
#include "runtime/grad_mode.h"
#include "runtime/trace_hooks.h"

namespace kiln::autograd {

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  for (const auto& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

namespace {

// A backend may hand back one of its inputs unchanged; history must then go on a fresh alias,
// never on the input itself.
Tensor unaliased(const Tensor& out, const std::vector<Tensor>& inputs) {
  bool aliased = out.grad_fn() != nullptr;
  for (const auto& t : inputs) aliased = aliased || out.same(t);
  return aliased ? make_view(out, out.impl().shape, out.strides(), out.offset()) : out;
}

}  // namespace

std::vector<Tensor> record_outputs(OpId op, std::vector<Tensor> inputs, const OpAttrs& attrs) {
  KILN_OP_SCOPE;
  const Grad grad = op_def(op).grad;
  KILN_CHECK(grad != Grad::refused || !grad_enabled() || !any_requires_grad(inputs),
             "{}: an inference op with no derivative, but an input requires grad (decode under "
             "NoGradGuard; train with the op's differentiable counterpart)",
             op);
  std::vector<Tensor> outputs = dispatch(op, inputs, attrs);
  const OpInterceptor* tracer = active_interceptor();
  if ((tracer && !tracer->records_history()) || !grad_enabled() || grad == Grad::none ||
      grad == Grad::refused || !any_requires_grad(inputs))
    return outputs;
  std::shared_ptr<OpNode> node;
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    if (!is_floating(outputs[k].dtype())) continue;  // integer outputs carry no gradient
    if (!node) node = std::make_shared<OpNode>(op, attrs, inputs);
    outputs[k] = unaliased(outputs[k], inputs);
    set_history(outputs[k], node, static_cast<std::uint32_t>(k));
  }
  if (!node) return outputs;
  std::vector<Edge> edges;
  for (const auto& t : inputs) edges.push_back(t.defined() ? gradient_edge(t) : Edge{});
  node->set_next_edges(std::move(edges));
  node->save_outputs(outputs);
  return outputs;
}

Tensor record(OpId op, std::vector<Tensor> inputs, const OpAttrs& attrs) {
  KILN_CHECK(num_outputs(op) == 1, "{}: has {} outputs; use record_outputs", op, num_outputs(op));
  return record_outputs(op, std::move(inputs), attrs)[0];
}

}  // namespace kiln::autograd
