// Reference optimizers: each update is a few kiln ops under NoGradGuard. Fused multi-tensor
// versions come with the code generator.
#pragma once

#include <vector>

#include "runtime/tensor.h"

namespace kiln::optim {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params);
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  // Drops every parameter's .grad (the next backward starts from nothing).
  void zero_grad();
  const std::vector<Tensor>& params() const { return params_; }

 protected:
  std::vector<Tensor> params_;
};

// SGD with optional momentum, Nesterov and (L2) weight decay, as torch.optim.SGD.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr, double momentum = 0.0, double weight_decay = 0.0,
      bool nesterov = false);
  void step() override;

 private:
  double lr_, momentum_, weight_decay_;
  bool nesterov_;
  std::vector<Tensor> momentum_buffers_;
};

// Adam with decoupled weight decay (Loshchilov & Hutter), as torch.optim.AdamW.
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Tensor> params, double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999,
        double eps = 1e-8, double weight_decay = 1e-2);
  void step() override;
  std::int64_t steps() const { return step_; }

 private:
  double lr_, beta1_, beta2_, eps_, weight_decay_;
  std::int64_t step_ = 0;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
};

}  // namespace kiln::optim
