// Nodes of the autograd graph and the saved-tensor version check.
#include "autograd/node.h"

#include <atomic>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace kiln::autograd {

namespace {
std::atomic<std::uint64_t> next_sequence_nr{0};
}

Node::Node() : sequence_nr_(next_sequence_nr++) {}

std::vector<Tensor> Node::apply(const Tensor& grad_output) {
  KILN_CHECK_AS(AutogradError, !released_,
                "backward: trying to backward through the graph a second time ({} already "
                "freed its saved tensors); pass retain_graph=true to the first backward",
                name());
  return backward(grad_output);
}

void Node::release() {
  released_ = true;
  release_saved();
}

SavedTensor::SavedTensor(const Tensor& t) : tensor_(t) {
  if (t.defined()) version_ = t.impl().storage->version();
}

Tensor SavedTensor::unpack(const std::string& node_name) const {
  if (tensor_.defined())
    KILN_CHECK_AS(AutogradError, tensor_.impl().storage->version() == version_,
                  "backward: a tensor of shape {} saved by {} was modified by an in-place "
                  "operation (version {} now, {} when saved)",
                  shape_str(tensor_.shape()), node_name, tensor_.impl().storage->version(),
                  version_);
  return tensor_;
}

OpNode::OpNode(OpId op, OpAttrs attrs, std::span<const Tensor> inputs)
    : op_(op), attrs_(std::move(attrs)) {
  for (const auto& t : inputs) {
    inputs_.emplace_back(t);
    input_meta_.push_back({t.shape(), t.dtype()});
  }
}

std::string OpNode::name() const { return fmt::format("{}Backward", op_); }

std::vector<Tensor> OpNode::backward(const Tensor& grad_output) {
  std::vector<Tensor> inputs;
  for (const auto& s : inputs_) inputs.push_back(s.unpack(name()));
  std::vector<Tensor> grads(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!needs_grad(i)) continue;
    Tensor g = derivative(op_, attrs_, inputs, i, grad_output);
    // Broadcasting and promotion are undone here, once, rather than in every rule.
    if (g.shape() != input_meta_[i].shape) g = sum_to(g, input_meta_[i].shape);
    if (g.dtype() != input_meta_[i].dtype) g = g.to(input_meta_[i].dtype);
    grads[i] = g;
  }
  return grads;
}

void OpNode::release_saved() {
  for (auto& s : inputs_) s.reset();
}

std::vector<Tensor> AccumulateGrad::backward(const Tensor& grad_output) {
  Tensor g = grad_enabled() ? grad_output : grad_output.detach();
  if (g.dtype() != leaf_->dtype) g = g.to(leaf_->dtype);
  if (leaf_->grad)
    leaf_->grad = add(Tensor(leaf_->grad), g).impl_ptr();
  else
    leaf_->grad = (g.is_contiguous() && !g.impl().is_view ? g : g.contiguous()).impl_ptr();
  return {};
}

Edge gradient_edge(const Tensor& t) {
  TensorImpl& impl = t.impl();
  if (impl.grad_fn) return {impl.grad_fn, impl.output_nr};
  if (!impl.requires_grad) return {};
  auto acc = impl.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    impl.grad_accumulator = acc;
  }
  return {acc, 0};
}

}  // namespace kiln::autograd
