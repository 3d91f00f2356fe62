// Multi-tensor updates: an optimizer step, a gradient-norm clip or a gradient accumulation over a
// whole list of tensors as one call per device. The code generator registers CUDA's (one generated
// kernel per dtype group reading a device table of pointers: jit/codegen/multi_tensor.h);
// autograd's optimizers reach it here without including jit/, and run their reference ops where no
// device has one (the CPU).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "runtime/tensor.h"

namespace kiln {

// What an implementation keeps between the calls of one caller (device tables, scratch memory),
// owned by the caller and opaque to it; null until the first call fills it.
class MultiTensorCache {
 public:
  virtual ~MultiTensorCache() = default;
};

// A step that a device flag cancels (GradScaler's skip): when `found_inf` (0-dim f32) is not 0
// the step writes nothing, and `skipped_steps` (0-dim i64, AdamW's) counts it, so that bias
// corrections use the steps taken. The host never reads either.
struct StepFlag {
  Tensor found_inf;
  Tensor skipped_steps;
};

// One AdamW step (torch.optim.AdamW's formulas); `step` is the count after this step (>= 1),
// less *skipped_steps when `flag` is set.
struct AdamWStep {
  double lr, beta1, beta2, eps, weight_decay;
  std::int64_t step;
  const StepFlag* flag = nullptr;
};

// One SGD step (torch.optim.SGD with dampening 0).
struct SGDStep {
  double lr, momentum, weight_decay;
  bool nesterov;
  const StepFlag* flag = nullptr;
};

// Dynamic loss scaling as torch.amp.GradScaler's defaults (growth and backoff factors, growth
// interval); the scale and the count of steps since the last change live on the device.
struct ScaleUpdate {
  double growth_factor, backoff_factor;
  std::int64_t growth_interval;
};

// Gradient-norm clipping as torch.nn.utils.clip_grad_norm_ (norm_type a p > 0 or infinity).
struct ClipGradNorm {
  double max_norm, norm_type;
};

// The lists an implementation takes are parallel: entry i of each has the shape, dtype and
// device of params[i], every tensor is contiguous and on this implementation's device, and the
// caller has checked all of it. Updates are in place; nothing is read back on the host.
class MultiTensorBackend {
 public:
  virtual ~MultiTensorBackend() = default;
  virtual void adamw(std::span<const Tensor> params, std::span<const Tensor> grads,
                     std::span<const Tensor> exp_avg, std::span<const Tensor> exp_avg_sq,
                     const AdamWStep& step, std::unique_ptr<MultiTensorCache>& cache) = 0;
  // `momentum_buffers` is empty when step.momentum is 0, else parallel to params (a first step
  // reads zero-filled buffers).
  virtual void sgd(std::span<const Tensor> params, std::span<const Tensor> grads,
                   std::span<const Tensor> momentum_buffers, const SGDStep& step,
                   std::unique_ptr<MultiTensorCache>& cache) = 0;
  // Scales every gradient by min(1, max_norm / (total + 1e-6)), total the norm of all their
  // elements, and returns that total as a 0-dim tensor on the device (f32, f64 when a gradient
  // is f64), computed and applied without a host read. Gradients may differ in dtype.
  virtual Tensor clip_grad_norm(std::span<const Tensor> grads, const ClipGradNorm& clip,
                                std::unique_ptr<MultiTensorCache>& cache) = 0;
  // Multiplies every gradient in place by 1 / scale (0-dim f32) and sets `found_inf` and
  // `found_any` (0-dim f32) to 1 when a gradient holds an inf or a NaN, in one launch: torch's
  // _amp_foreach_non_finite_check_and_unscale_. Gradients may differ in dtype.
  virtual void unscale(std::span<const Tensor> grads, const Tensor& scale, const Tensor& found_inf,
                       const Tensor& found_any, std::unique_ptr<MultiTensorCache>& cache) = 0;
  // grads[i] += incoming[i] for every i, in place (torch._foreach_add_), each incoming gradient
  // first converted to its grad's dtype; one launch per pair of dtypes. Here incoming[i] has
  // grads[i]'s shape and device but may differ in dtype (f16, bf16, f32, f64), and no incoming
  // gradient overlaps a grad, nor one grad another.
  virtual void accumulate(std::span<const Tensor> grads, std::span<const Tensor> incoming,
                          std::unique_ptr<MultiTensorCache>& cache) = 0;
  // torch's _amp_update_scale_ on `scale` (0-dim f32) and `growth_tracker` (0-dim i64), reading
  // flags[0] (any inf this iteration), then zeroes every entry of `flags` (1-D f32) for the next.
  virtual void update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& flags,
                            const ScaleUpdate& update) = 0;
};

// Installs `backend` (which must outlive every caller) for a device type.
void register_multi_tensor_backend(Device::Type type, MultiTensorBackend* backend);
// The implementation for a device type, or nullptr when it has none.
MultiTensorBackend* multi_tensor_backend(Device::Type type);

}  // namespace kiln
