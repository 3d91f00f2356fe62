// Loss scaling for f16 training, as torch.amp.GradScaler: the loss is multiplied by a scale
// before backward so that small f16 gradients do not flush to zero; before the optimizer step
// the gradients are divided by it again and checked for infs and NaNs, and a step with any is
// skipped while the scale backs off. On CUDA all of it stays on the device: one multi-tensor
// launch unscales and checks, the fused optimizer reads the flag and skips in its kernel, and
// one launch updates the scale. Nothing waits for the host.
#pragma once

#include <cstdint>
#include <map>

#include "autograd/nn.h"
#include "autograd/optim.h"
#include "runtime/tensor.h"

namespace kiln::amp {

class GradScaler {
 public:
  // torch.amp.GradScaler's defaults.
  struct Options {
    double init_scale = 65536.0;
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    std::int64_t growth_interval = 2000;
    bool enabled = true;  // false: every call passes through (scale() returns the loss as is)
  };

  GradScaler();
  // Error naming GradScaler for a non-positive or non-finite scale, a growth factor <= 1, a
  // backoff factor outside (0, 1) or a growth interval < 1.
  explicit GradScaler(Options options);

  bool enabled() const { return options_.enabled; }
  // loss * scale (autograd records it, so backward produces scaled gradients). The scale lives on
  // the loss's device from the first call on; a loss on another device later is an Error.
  Tensor scale(const Tensor& loss);
  // Divides the gradients of `optimizer`'s parameters by the scale in place and records whether
  // any holds an inf or a NaN (on the device). Call it before clipping; step() calls it when it
  // was not called. Error when scale() was never called, when called twice for one optimizer
  // before update(), after step() for it, or on f16/bf16 gradients (the parameters are to stay
  // f32 master weights: autocast keeps them so, and bf16 needs no scaling).
  void unscale_(optim::Optimizer& optimizer);
  // unscale_() if not done, then the optimizer's step, skipped when its gradients held an inf or a
  // NaN (Optimizer::step_unless). Error when called twice for one optimizer before update().
  void step(optim::Optimizer& optimizer);
  // Backs the scale off (times backoff_factor) when any optimizer stepped since the last update
  // found an inf or a NaN, else grows it (times growth_factor) after growth_interval steps
  // without one, as torch's; then readies every optimizer for the next iteration. Error when
  // no optimizer was stepped or unscaled since the last update.
  void update();
  // Sets the scale (a host value: one copy to the device) and readies the next iteration.
  void update(double new_scale);

  // The current scale as a 0-dim f32 tensor on the loss's device (undefined before scale()).
  const Tensor& scale_tensor() const { return scale_; }
  // The current scale; on CUDA this reads the device (one copy to the host). The initial scale
  // before the first scale() call.
  double get_scale() const;
  // "scale", "growth_factor", "backoff_factor", "growth_interval", "growth_tracker" (torch's keys).
  nn::StateDict state_dict() const;
  void load_state_dict(const nn::StateDict& state);

 private:
  enum class Stage { ready, unscaled, stepped };
  struct PerOptimizer {
    Stage stage = Stage::ready;
    std::int64_t slot = 0;  // its flag: flags_[slot]; flags_[0] is any optimizer's
  };

  PerOptimizer& entry_of(const optim::Optimizer& optimizer);
  // flags_ with room for every optimizer seen so far (zeros when it grows).
  void reserve_flags();
  void finish_iteration();

  Options options_;
  Tensor scale_;           // 0-dim f32
  Tensor growth_tracker_;  // 0-dim i64: steps without an inf since the scale last changed
  Tensor flags_;           // 1-D f32: the iteration's inf flags
  std::int64_t initial_growth_tracker_ = 0;  // a loaded state's, until scale() creates the tensors
  std::map<const optim::Optimizer*, PerOptimizer> optimizers_;
  std::unique_ptr<MultiTensorCache> unscale_cache_;
};

}  // namespace kiln::amp
