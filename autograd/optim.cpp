// SGD and AdamW.
#include "autograd/optim.h"

#include <cmath>

#include "runtime/grad_mode.h"
#include "autograd/ops.h"

namespace kiln::optim {

Optimizer::Optimizer(std::vector<Tensor> params) : params_(std::move(params)) {
  for (std::size_t i = 0; i < params_.size(); ++i)
    KILN_CHECK_AS(AutogradError, params_[i].defined() && params_[i].requires_grad(),
                  "optimizer: parameter {} (shape {}) does not require grad", i,
                  params_[i].defined() ? shape_str(params_[i].shape()) : "undefined");
}

void Optimizer::zero_grad() {
  for (auto& p : params_) p.set_grad(Tensor());
}

SGD::SGD(std::vector<Tensor> params, double lr, double momentum, double weight_decay,
         bool nesterov)
    : Optimizer(std::move(params)),
      lr_(lr),
      momentum_(momentum),
      weight_decay_(weight_decay),
      nesterov_(nesterov),
      momentum_buffers_(params_.size()) {
  KILN_CHECK(lr >= 0, "SGD: learning rate must be non-negative, got {}", lr);
  KILN_CHECK(momentum >= 0, "SGD: momentum must be non-negative, got {}", momentum);
  KILN_CHECK(!nesterov || momentum > 0, "SGD: nesterov needs a positive momentum");
}

void SGD::step() {
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (weight_decay_ != 0) g = g + p * weight_decay_;
    if (momentum_ != 0) {
      Tensor& buf = momentum_buffers_[i];
      buf = buf.defined() ? buf * momentum_ + g : g.clone();
      g = nesterov_ ? g + buf * momentum_ : buf;
    }
    p.add_(g, -lr_);
  }
}

AdamW::AdamW(std::vector<Tensor> params, double lr, double beta1, double beta2, double eps,
             double weight_decay)
    : Optimizer(std::move(params)),
      lr_(lr),
      beta1_(beta1),
      beta2_(beta2),
      eps_(eps),
      weight_decay_(weight_decay),
      exp_avg_(params_.size()),
      exp_avg_sq_(params_.size()) {
  KILN_CHECK(lr >= 0, "AdamW: learning rate must be non-negative, got {}", lr);
  KILN_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1,
             "AdamW: betas must be in [0, 1), got ({}, {})", beta1, beta2);
  KILN_CHECK(eps >= 0, "AdamW: eps must be non-negative, got {}", eps);
}

void AdamW::step() {
  NoGradGuard no_grad;
  ++step_;
  double bias1 = 1.0 - std::pow(beta1_, static_cast<double>(step_));
  double bias2 = 1.0 - std::pow(beta2_, static_cast<double>(step_));
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (!exp_avg_[i].defined()) {
      exp_avg_[i] = zeros_like(p);
      exp_avg_sq_[i] = zeros_like(p);
    }
    p.mul_(1.0 - lr_ * weight_decay_);
    exp_avg_[i] = exp_avg_[i] * beta1_ + g * (1.0 - beta1_);
    exp_avg_sq_[i] = exp_avg_sq_[i] * beta2_ + g * g * (1.0 - beta2_);
    Tensor denom = sqrt(exp_avg_sq_[i] / bias2) + eps_;
    p.add_(exp_avg_[i] / denom, -lr_ / bias1);
  }
}

}  // namespace kiln::optim
