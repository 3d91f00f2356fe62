// StepLR and CosineWithWarmup over the LRScheduler base (epoch counter, state dict).
#include "autograd/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "runtime/factories.h"

namespace kiln::optim {

namespace {

void check_step_lr(std::int64_t step_size, double gamma) {
  KILN_CHECK(step_size > 0, "StepLR: step_size must be positive, got {}", step_size);
  KILN_CHECK(std::isfinite(gamma) && gamma >= 0,
             "StepLR: gamma must be finite and non-negative, got {}", gamma);
}

void check_cosine(std::int64_t warmup, std::int64_t total, double min_lr, double base_lr) {
  KILN_CHECK(warmup >= 0, "CosineWithWarmup: warmup_steps must be non-negative, got {}", warmup);
  KILN_CHECK(total > 0 && total >= warmup,
             "CosineWithWarmup: total_steps must be positive and at least warmup_steps ({}), "
             "got {}",
             warmup, total);
  KILN_CHECK(std::isfinite(min_lr) && min_lr >= 0 && min_lr <= base_lr,
             "CosineWithWarmup: min_lr must be in [0, the optimizer's lr {}], got {}", base_lr,
             min_lr);
}


}  // namespace

// ---- LRScheduler ----

LRScheduler::LRScheduler(std::string name, Optimizer& optimizer)
    : name_(std::move(name)), optimizer_(optimizer), base_lr_(optimizer.lr()) {}

void LRScheduler::start() {
  last_epoch_ = 0;
  last_lr_ = lr_at(0);
  optimizer_.set_lr(last_lr_);
}

void LRScheduler::step() {
  ++last_epoch_;
  last_lr_ = lr_at(last_epoch_);
  optimizer_.set_lr(last_lr_);
}

nn::StateDict LRScheduler::state_dict() const {
  nn::StateDict state = {{"last_epoch", scalar_tensor(last_epoch_, DType::i64)},
                         {"base_lr", scalar_tensor(base_lr_, DType::f64)},
                         {"last_lr", scalar_tensor(last_lr_, DType::f64)}};
  for (auto& entry : args()) state.push_back(std::move(entry));
  return state;
}

void LRScheduler::load_state_dict(const nn::StateDict& state) {
  std::string owner = name_ + ".load_state_dict";
  StateReader reader(owner, state);
  std::int64_t last_epoch = reader.integer("last_epoch");
  double base_lr = reader.scalar("base_lr"), last_lr = reader.scalar("last_lr");
  KILN_CHECK(last_epoch >= 0, "{}: 'last_epoch' must be non-negative, got {}", owner, last_epoch);
  KILN_CHECK(std::isfinite(base_lr) && base_lr >= 0,
             "{}: 'base_lr' must be finite and non-negative, got {}", owner, base_lr);
  KILN_CHECK(std::isfinite(last_lr) && last_lr >= 0,
             "{}: 'last_lr' must be finite and non-negative, got {}", owner, last_lr);
  auto store_args = read_args(reader, base_lr);
  reader.finish();
  last_epoch_ = last_epoch;
  base_lr_ = base_lr;
  last_lr_ = last_lr;
  store_args();
  optimizer_.set_lr(last_lr_);
}

// ---- StepLR ----

StepLR::StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma)
    : LRScheduler("StepLR", optimizer), step_size_(step_size), gamma_(gamma) {
  check_step_lr(step_size, gamma);
  start();
}

double StepLR::lr_at(std::int64_t epoch) const {
  return base_lr_ * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

nn::StateDict StepLR::args() const {
  return {{"step_size", scalar_tensor(step_size_, DType::i64)}, {"gamma", scalar_tensor(gamma_, DType::f64)}};
}

std::function<void()> StepLR::read_args(StateReader& reader, double) {
  std::int64_t step_size = reader.integer("step_size");
  double gamma = reader.scalar("gamma");
  check_step_lr(step_size, gamma);
  return [this, step_size, gamma] {
    step_size_ = step_size;
    gamma_ = gamma;
  };
}

// ---- CosineWithWarmup ----

CosineWithWarmup::CosineWithWarmup(Optimizer& optimizer, std::int64_t warmup_steps,
                                   std::int64_t total_steps, double min_lr)
    : LRScheduler("CosineWithWarmup", optimizer),
      warmup_steps_(warmup_steps),
      total_steps_(total_steps),
      min_lr_(min_lr) {
  check_cosine(warmup_steps, total_steps, min_lr, base_lr_);
  start();
}

double CosineWithWarmup::lr_at(std::int64_t epoch) const {
  // HuggingFace's arithmetic, factor first: lr = base_lr * factor.
  if (epoch < warmup_steps_)
    return base_lr_ * (static_cast<double>(epoch) / static_cast<double>(warmup_steps_));
  double progress = static_cast<double>(epoch - warmup_steps_) /
                    static_cast<double>(std::max<std::int64_t>(1, total_steps_ - warmup_steps_));
  progress = std::min(progress, 1.0);
  double factor = std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
  if (min_lr_ == 0.0 || base_lr_ == 0.0) return base_lr_ * factor;
  double min_rate = min_lr_ / base_lr_;
  return base_lr_ * (factor * (1.0 - min_rate) + min_rate);
}

nn::StateDict CosineWithWarmup::args() const {
  return {{"warmup_steps", scalar_tensor(warmup_steps_, DType::i64)},
          {"total_steps", scalar_tensor(total_steps_, DType::i64)},
          {"min_lr", scalar_tensor(min_lr_, DType::f64)}};
}

std::function<void()> CosineWithWarmup::read_args(StateReader& reader, double base_lr) {
  std::int64_t warmup = reader.integer("warmup_steps"), total = reader.integer("total_steps");
  double min_lr = reader.scalar("min_lr");
  check_cosine(warmup, total, min_lr, base_lr);
  return [this, warmup, total, min_lr] {
    warmup_steps_ = warmup;
    total_steps_ = total;
    min_lr_ = min_lr;
  };
}

}  // namespace kiln::optim
