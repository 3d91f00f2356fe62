// Learning rate schedules over any optimizer (optim::Optimizer::set_lr), as torch.optim's
// schedulers: the constructor takes the optimizer's lr as the base lr and sets epoch 0's lr;
// each step() moves to the next epoch and sets its lr. Schedules are closed forms of the epoch,
// so a scheduler restored from its state dict continues exactly where it stopped. A scheduler
// holds its optimizer by reference: the optimizer must outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "autograd/nn.h"
#include "autograd/optim.h"

namespace kiln::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances one epoch (or step) and sets the optimizer's lr to the schedule's value there.
  void step();
  // The lr this scheduler set last.
  double last_lr() const { return last_lr_; }
  // Epochs taken: 0 after construction.
  std::int64_t last_epoch() const { return last_epoch_; }
  double base_lr() const { return base_lr_; }
  // The schedule at any epoch >= 0 (no side effects).
  virtual double lr_at(std::int64_t epoch) const = 0;

  // "last_epoch" (i64), "base_lr", "last_lr" and the schedule's arguments (0-dim tensors).
  nn::StateDict state_dict() const;
  // Restores the counters and arguments and sets the optimizer's lr to the restored last_lr
  // (torch leaves the optimizer alone; its own state dict restores the same value). Error (and
  // nothing changed) on missing, unexpected or invalid entries.
  void load_state_dict(const nn::StateDict& state);

 protected:
  // `name` is for errors; derived constructors check their arguments, then call start().
  LRScheduler(std::string name, Optimizer& optimizer);
  // Sets epoch 0's lr (cannot be done in this constructor: lr_at is not yet callable).
  void start();
  // The schedule's arguments as state entries, and reading them back: read_args validates and
  // returns a function that stores them, called once every check has passed.
  virtual nn::StateDict args() const = 0;
  virtual std::function<void()> read_args(StateReader& reader, double base_lr) = 0;

  std::string name_;
  Optimizer& optimizer_;
  double base_lr_;
  std::int64_t last_epoch_ = 0;
  double last_lr_ = 0.0;
};

// lr = base_lr * gamma^floor(epoch / step_size), torch.optim.lr_scheduler.StepLR's closed form
// (torch's step() multiplies the current lr by gamma instead; the values agree to rounding).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma = 0.1);
  double lr_at(std::int64_t epoch) const override;

 protected:
  nn::StateDict args() const override;
  std::function<void()> read_args(StateReader& reader, double base_lr) override;

 private:
  std::int64_t step_size_;
  double gamma_;
};

// Linear warmup from 0, then a half cosine from base_lr down to min_lr:
//   epoch < warmup:  base_lr * epoch / warmup
//   otherwise:       min_lr + (base_lr - min_lr) * 0.5 * (1 + cos(pi * progress)),
//                    progress = min(1, (epoch - warmup) / max(1, total - warmup)).
// With min_lr = 0 this is HuggingFace's get_cosine_schedule_with_warmup up to total_steps (and
// with min_lr its get_cosine_with_min_lr_schedule_with_warmup); past total_steps, where
// HuggingFace's cosine rises again, the lr stays at min_lr.
class CosineWithWarmup : public LRScheduler {
 public:
  CosineWithWarmup(Optimizer& optimizer, std::int64_t warmup_steps, std::int64_t total_steps,
                   double min_lr = 0.0);
  double lr_at(std::int64_t epoch) const override;

 protected:
  nn::StateDict args() const override;
  std::function<void()> read_args(StateReader& reader, double base_lr) override;

 private:
  std::int64_t warmup_steps_, total_steps_;
  double min_lr_;
};

}  // namespace kiln::optim
