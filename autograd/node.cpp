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

SavedTensor::SavedTensor(const Tensor& t, bool values_needed)
    : tensor_(t), check_version_(values_needed) {
  if (!t.defined()) return;
  version_ = t.impl().storage->version();
  if (!values_needed) {
    auto meta = std::make_shared<TensorImpl>();
    meta->storage = std::make_shared<Storage>(nullptr, 0, t.device(), nullptr);
    meta->shape = t.impl().shape;
    meta->strides = contiguous_strides(meta->shape);
    meta->dtype = t.dtype();
    tensor_ = Tensor(std::move(meta));
  }
}

Tensor SavedTensor::unpack(const std::string& node_name) const {
  if (tensor_.defined() && check_version_)
    KILN_CHECK_AS(AutogradError, tensor_.impl().storage->version() == version_,
                  "backward: a tensor of shape {} saved by {} was modified by an in-place "
                  "operation (version {} now, {} when saved)",
                  shape_str(tensor_.shape()), node_name, tensor_.impl().storage->version(),
                  version_);
  return tensor_;
}

OpNode::OpNode(OpId op, OpAttrs attrs, std::span<const Tensor> inputs)
    : op_(op), attrs_(std::move(attrs)) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    inputs_.emplace_back(inputs[i], reads_input_values(op, i));
    input_meta_.push_back({inputs[i].shape(), inputs[i].dtype()});
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
  // The engine hands over a gradient it alone holds, unless the same tensor also goes to other
  // leaves (add passes its gradient through) or belongs to the caller (an explicit gradient):
  // .grad may then only take a copy, or an in-place update of one .grad would change the others.
  bool sole_owner =
      grad_output.impl_ptr().use_count() == 1 && grad_output.impl().storage.use_count() == 1;
  Tensor g = grad_enabled() ? grad_output : grad_output.detach();
  if (g.dtype() != leaf_->dtype) {
    g = g.to(leaf_->dtype);
    sole_owner = true;
  }
  if (leaf_->grad)
    leaf_->grad = add(Tensor(leaf_->grad), g).impl_ptr();
  else if (sole_owner && g.is_contiguous() && !g.impl().is_view)
    leaf_->grad = g.impl_ptr();
  else
    leaf_->grad = g.clone().impl_ptr();
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
