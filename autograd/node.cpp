// Nodes of the autograd graph and the saved-tensor checks.
#include "autograd/node.h"

#include <atomic>

#include "autograd/ops.h"
#include "runtime/grad_mode.h"
#include "runtime/multi_tensor.h"

namespace kiln::autograd {

namespace {
std::atomic<std::uint64_t> next_sequence_nr{0};

// A tensor with `t`'s metadata and no data.
Tensor metadata_only(const Tensor& t) {
  auto meta = std::make_shared<TensorImpl>();
  meta->storage = std::make_shared<Storage>(nullptr, 0, t.device(), nullptr);
  meta->shape = t.impl().shape;
  meta->strides = contiguous_strides(meta->shape);
  meta->dtype = t.dtype();
  // While a joint graph is traced, the placeholder's sizes stay symbolic.
  meta->trace_value = t.impl().trace_value;
  return Tensor(std::move(meta));
}

}  // namespace

Tensor without_history(const Tensor& t) {
  Tensor alias = make_view(t, t.impl().shape, t.strides(), t.offset());
  alias.impl().is_view = t.impl().is_view;
  return alias;
}

void set_history(Tensor& t, std::shared_ptr<Node> node, std::uint32_t output_nr) {
  TensorImpl& impl = t.impl();
  impl.grad_fn = std::move(node);
  impl.output_nr = output_nr;
  impl.requires_grad = true;
}

void clear_history(Tensor& t) {
  TensorImpl& impl = t.impl();
  impl.grad_fn = nullptr;
  impl.output_nr = 0;
  impl.requires_grad = false;
}

Node::Node(std::size_t num_outputs) : sequence_nr_(next_sequence_nr++), num_outputs_(num_outputs) {}

SavedTensor SavedTensor::input(const Tensor& t, bool values_needed) {
  SavedTensor s;
  if (!t.defined()) return s;
  s.version_ = t.impl().storage->version();
  s.check_version_ = values_needed;
  s.tensor_ = values_needed ? t : metadata_only(t);
  return s;
}

SavedTensor SavedTensor::output(const Tensor& t, std::uint32_t output_nr, bool values_needed) {
  SavedTensor s = input(t, values_needed);
  if (values_needed && s.tensor_.defined()) s.tensor_ = without_history(t);
  s.is_output_ = true;
  s.output_nr_ = output_nr;
  return s;
}

void SavedTensor::release() {
  // Metadata holds no data worth freeing, and a rule that reads only shapes may run again.
  if (!check_version_) return;
  tensor_ = Tensor();
  released_ = true;
}

Tensor SavedTensor::unpack(Node& owner) const {
  KILN_CHECK_AS(AutogradError, !released_,
                "backward: trying to backward through the graph a second time: the first "
                "backward freed the tensors {} saved; pass retain_graph=true to every backward "
                "through this graph but the last",
                owner.name());
  if (!tensor_.defined()) return tensor_;
  if (check_version_)
    KILN_CHECK_AS(AutogradError, tensor_.impl().storage->version() == version_,
                  "backward: a tensor of shape {} saved by {} was modified by an in-place "
                  "operation (version {} now, {} when saved)",
                  shape_str(tensor_.impl().shape), owner.name(), tensor_.impl().storage->version(),
                  version_);
  if (!is_output_ || !grad_enabled() || !check_version_ || !is_floating(tensor_.dtype()))
    return tensor_;
  Tensor out = without_history(tensor_);
  set_history(out, owner.shared_from_this(), output_nr_);
  return out;
}

OpNode::OpNode(OpId op, OpAttrs attrs, std::span<const Tensor> inputs)
    : Node(static_cast<std::size_t>(kiln::num_outputs(op))), op_(op), attrs_(std::move(attrs)) {
  SavedSet saved = op_def(op).saved;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    inputs_.push_back(SavedTensor::input(inputs[i], saved::input(saved, i)));
}

void OpNode::save_outputs(std::span<const Tensor> outputs) {
  SavedSet saved = op_def(op_).saved;
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    bool needed = saved::output(saved, k);
    outputs_.push_back(needed ? SavedTensor::output(outputs[k], static_cast<std::uint32_t>(k), true)
                              : SavedTensor());
  }
}

std::string OpNode::name() const {
  return fmt::format("{}Backward", op_);
}

std::vector<Tensor> OpNode::backward(const std::vector<Tensor>& grad_outputs) {
  std::vector<Tensor> inputs, outputs;
  for (const auto& s : inputs_) inputs.push_back(s.unpack(*this));
  for (const auto& s : outputs_) outputs.push_back(s.unpack(*this));
  std::vector<Tensor> all_inputs;
  DerivativeArgs args{op_, attrs_, inputs, outputs, grad_outputs, &all_inputs};
  std::vector<Tensor> grads(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!needs_grad(i)) continue;
    const Tensor& in = inputs[i];
    if (op_def(op_).grad == Grad::zero) {
      grads[i] = zeros(in.impl().shape, in.dtype(), in.device());
      continue;
    }
    Tensor g = derivative(args, i);
    // Broadcasting and promotion are undone here, once, rather than in every rule.
    if (g.impl().shape != in.impl().shape) g = sum_to(g, in.impl().shape);
    if (g.dtype() != in.dtype()) g = g.to(in.dtype());
    grads[i] = g;
  }
  return grads;
}

void OpNode::release_saved() {
  for (auto& s : inputs_) s.release();
  for (auto& s : outputs_) s.release();
}

std::vector<Tensor> AccumulateGrad::backward(const std::vector<Tensor>& grad_outputs) {
  const Tensor& grad_output = grad_outputs.at(0);
  if (!grad_output.defined()) return {};
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
  // A view that is the whole of a storage it alone holds (a reshape of a fresh result) is as
  // good as that result: .grad takes it, as no longer a view, rather than a copy.
  const TensorImpl& gi = g.impl();
  bool whole = !gi.is_view ||
               (gi.offset == 0 &&
                static_cast<std::size_t>(g.numel()) * itemsize(g.dtype()) == gi.storage->nbytes());
  if (leaf_->grad) {
    leaf_->grad = add(Tensor(leaf_->grad), g).impl_ptr();
  } else if (sole_owner && g.is_contiguous() && whole) {
    leaf_->grad = g.impl_ptr();
    leaf_->grad->is_view = false;
  } else {
    leaf_->grad = g.clone().impl_ptr();
  }
  return {};
}

Tensor AccumulateGrad::in_place_target(const Tensor& grad_output) const {
  if (grad_enabled() || !grad_output.defined() || !leaf_->grad) return Tensor();
  // Only a .grad that nothing else holds (Tensor::grad() shares its TensorImpl, set_grad the
  // caller's tensor) is updated in place, so the update cannot be seen: a .grad the user took
  // keeps its values, as when every accumulation made a new tensor (PyTorch updates it too).
  if (leaf_->grad.use_count() != 1 || leaf_->grad->storage.use_count() != 1) return Tensor();
  Tensor grad(leaf_->grad);
  // The fused accumulation's promise (runtime/multi_tensor.h); a .grad of another dtype than the
  // leaf's, or one with history, keeps add's promotion and history.
  bool takes = !grad.requires_grad() && grad.dtype() == leaf_->dtype &&
               grad.device() == grad_output.device() && grad.shape() == grad_output.shape() &&
               grad.is_contiguous() && grad_output.is_contiguous() &&
               is_floating(grad_output.dtype()) &&
               multi_tensor_backend(grad.device().type) != nullptr;
  return takes ? grad : Tensor();
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
