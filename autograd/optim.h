// Optimizers (SGD, AdamW), their learning rate and state dicts, and gradient clipping. On a
// device with a multi-tensor implementation (CUDA: runtime/multi_tensor.h) a step updates every
// parameter in one generated launch per dtype group, and clipping scales the gradients without
// reading the norm on the host; elsewhere (the CPU) each update is the reference: a few kiln ops
// per parameter under NoGradGuard.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autograd/nn.h"
#include "runtime/multi_tensor.h"
#include "runtime/tensor.h"

namespace kiln::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  // step(), cancelled when `found_inf` (a one-element f32 tensor on the parameters' device, a
  // loss scaler's inf flag) is not 0. The fused step reads the flag in its kernel, so the host
  // never waits; the reference step reads it on the host (on CUDA: one copy to the host).
  void step_unless(const Tensor& found_inf);
  // Drops every parameter's .grad (the next backward starts from nothing).
  void zero_grad();
  // Whether step() runs the fused multi-tensor update (the default wherever the parameters'
  // device has one, as torch's fused=True; false runs the reference ops on every device, a
  // launch or more per op and parameter on CUDA: for comparisons).
  bool fused() const;
  void set_fused(bool fused) { fused_ = fused; }
  const std::vector<Tensor>& params() const { return params_; }
  const std::string& name() const { return name_; }

  // The learning rate the next step() uses; schedulers (autograd/lr_scheduler.h) set it.
  double lr() const { return lr_; }
  // Error unless `lr` is finite and non-negative.
  void set_lr(double lr);

  // Hyperparameters (0-dim f64, "lr", ...), "num_params" (0-dim i64) and per-parameter state
  // ("state.<i>.<buffer>", i the parameter's index), as torch.optim's state_dict: the tensors
  // are the optimizer's own where the reference step runs (it rebinds them, never writes into
  // them), and copies where the fused step runs (it updates them in place), so a state dict is a
  // snapshot either way.
  virtual nn::StateDict state_dict() const = 0;
  // Replaces hyperparameters and state with copies of `state`'s, cast to each parameter's dtype
  // and device. Error (and nothing changed) on a missing or unexpected key, a parameter count
  // or a buffer shape that does not match this optimizer's parameters.
  virtual void load_state_dict(const nn::StateDict& state) = 0;

 protected:
  // Error naming the optimizer when the parameters are on more than one device.
  Optimizer(std::string name, std::vector<Tensor> params, double lr);
  // The multi-tensor implementation step() uses, or nullptr for the reference ops.
  MultiTensorBackend* fused_backend() const;
  // The fused step under a device flag (step_unless on a device with a fused step).
  virtual void step_fused_unless(MultiTensorBackend& backend, const Tensor& found_inf) = 0;
  // The parameters that have a gradient, for a fused step: Error naming the optimizer when a
  // gradient's dtype or device is not its parameter's, or a parameter is a view with gaps (a
  // strided slice), which a fused step cannot update in place. A dense parameter that is not
  // contiguous (a transpose) is updated through the permutation that makes it contiguous, its
  // state kept in the same layout; a gradient in another layout is read through a copy.
  struct FusedLists {
    std::vector<std::size_t> index;                // into params_
    std::vector<std::vector<std::int64_t>> order;  // dims that make the parameter contiguous
    std::vector<Tensor> params, grads;             // contiguous (params: views of the parameters)
  };
  FusedLists fused_lists() const;
  // State buffer `state` of entry k of `lists` as the kernels take it (a contiguous view in the
  // parameter's layout): zero-filled when there is none yet, laid out again when loaded unlike it.
  static Tensor fused_state(Tensor& state, const FusedLists& lists, std::size_t k);
  // Bumps the versions of what the kernels wrote in place.
  static void finish_fused(const FusedLists& lists, const std::vector<Tensor>& states);
  // `t` as a state dict holds it: a copy where the fused step writes it in place.
  Tensor state_entry(const Tensor& t) const;

  std::string name_;  // "SGD", "AdamW": for error messages
  std::vector<Tensor> params_;
  double lr_;
  bool fused_ = true;
  std::unique_ptr<MultiTensorCache> fused_cache_;  // the fused step's device tables
};

// SGD with optional momentum, Nesterov and (L2) weight decay, as torch.optim.SGD (dampening 0).
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr, double momentum = 0.0, double weight_decay = 0.0,
      bool nesterov = false);
  void step() override;
  // "lr", "momentum", "weight_decay", "nesterov" (0 or 1), "num_params",
  // "state.<i>.momentum_buffer" for each parameter that has one.
  nn::StateDict state_dict() const override;
  void load_state_dict(const nn::StateDict& state) override;

 private:
  void step_fused(MultiTensorBackend& backend, const StepFlag* flag = nullptr);
  void step_fused_unless(MultiTensorBackend& backend, const Tensor& found_inf) override;

  double momentum_, weight_decay_;
  bool nesterov_;
  std::vector<Tensor> momentum_buffers_;
};

// Adam with decoupled weight decay (Loshchilov & Hutter), as torch.optim.AdamW.
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Tensor> params, double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999,
        double eps = 1e-8, double weight_decay = 1e-2);
  void step() override;
  // The steps taken. Steps a loss scaler's flag cancelled on the device are not counted; when
  // there were such steps this reads their count (on CUDA: one copy to the host).
  std::int64_t steps() const;
  // "lr", "beta1", "beta2", "eps", "weight_decay", "step" (i64), "num_params",
  // "state.<i>.exp_avg" and "state.<i>.exp_avg_sq" for each parameter that has them.
  nn::StateDict state_dict() const override;
  void load_state_dict(const nn::StateDict& state) override;

 private:
  void step_fused(MultiTensorBackend& backend, const StepFlag* flag = nullptr);
  void step_fused_unless(MultiTensorBackend& backend, const Tensor& found_inf) override;

  double beta1_, beta2_, eps_, weight_decay_;
  // One count for all parameters (torch keeps one per parameter; they agree unless a parameter
  // misses gradients on some steps, where torch's count for it lags). Steps attempted: those a
  // device flag cancelled are counted in skipped_steps_ (0-dim i64 on the device, undefined
  // until the first flagged step), and the kernel takes the difference.
  std::int64_t step_ = 0;
  Tensor skipped_steps_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
};

// Scales the gradients of `params` in place so that their global norm (the norm of the vector
// of per-parameter norms, as torch.nn.utils.clip_grad_norm_) is at most `max_norm`, and returns
// that norm before clipping. Every gradient is multiplied by min(1, max_norm / (total + 1e-6))
// in its dtype; parameters without a gradient are skipped. `norm_type` is a p > 0 or infinity.
// A non-finite total is not an error (torch's default error_if_nonfinite=false): the gradients
// are scaled anyway, to zeros or NaNs. Gradients on two devices are an error.
// Runs under NoGradGuard: no autograd history, whatever the grad mode.
// CPU gradients: norms accumulated in f64. CUDA gradients: clip_grad_norm_tensor_'s two launches,
// then the norm is read on the host: one device-to-host copy, which waits for the device.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);
// The same, returning the norm as a 0-dim tensor on the gradients' device (f32, f64 when a
// gradient is f64), as torch's clip_grad_norm_ does. On CUDA nothing is read on the host: one
// multi-tensor reduction leaves per-block partials (deterministic: a fixed tree, no atomics), and
// one multi-tensor launch combines them and scales every gradient, whatever their dtypes;
// accumulation in f32 (f64 when a gradient is f64).
Tensor clip_grad_norm_tensor_(const std::vector<Tensor>& params, double max_norm,
                              double norm_type = 2.0);
// Clamps every gradient of `params` to [-clip_value, clip_value] in place (NaNs stay NaN).
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

// Reads an optimizer's or scheduler's state dict with errors that name the owner and the key:
// lookups mark keys as read, and finish() rejects the keys nobody read.
class StateReader {
 public:
  StateReader(std::string owner, const nn::StateDict& state);
  // The entry, or nullptr when absent.
  const Tensor* find(const std::string& key);
  // A one-element tensor's value; Error when absent or not one element.
  double scalar(const std::string& key);
  // A one-element integer tensor's value; Error when absent, not one element or not integer.
  std::int64_t integer(const std::string& key);
  // Error naming the first key that no lookup asked for.
  void finish() const;

 private:
  std::string owner_;
  const nn::StateDict& state_;
  std::map<std::string, std::size_t> index_;
  std::vector<bool> read_;
};

}  // namespace kiln::optim
