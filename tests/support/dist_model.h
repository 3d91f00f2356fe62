// The model, data and training loop of the data-parallel tests, shared by the worker that runs
// as each rank (tests/support/dist_worker.cpp) and the single-process reference in the suites.
// Step s's global batch is kRows rows; rank r of n trains on rows [r*kRows/n, (r+1)*kRows/n).
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "jit/compile.h"
#include "runtime/random.h"

namespace kiln::test {

inline constexpr std::int64_t kRows = 8;
inline constexpr int kSteps = 5;

class DistMlp : public nn::Module {
 public:
  // `hidden` other than 16 makes a model another rank's does not match.
  explicit DistMlp(std::uint64_t seed, std::int64_t hidden = 16, bool extra = false)
      : gen_(seed),
        fc1(8, hidden, true, DType::f32, &gen_),
        fc2(hidden, 16, true, DType::f32, &gen_),
        fc3(16, 4, true, DType::f32, &gen_),
        spare(4, 4, true, DType::f32, &gen_) {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
    if (extra) register_module("spare", spare);  // never used by forward
  }
  Tensor forward(const Tensor& x) const { return fc3(tanh(fc2(tanh(fc1(x))))); }

 private:
  Generator gen_;

 public:
  nn::Linear fc1, fc2, fc3, spare;
};

// Step `step`'s inputs and targets, rows [first, first + count) of the global batch.
inline std::pair<Tensor, Tensor> dist_batch(int step, std::int64_t first, std::int64_t count,
                                            Device device) {
  Generator gen(1000 + static_cast<std::uint64_t>(step));
  Tensor x = randn({kRows, 8}, DType::f32, &gen);
  Tensor y = randn({kRows, 4}, DType::f32, &gen);
  return {x.slice(0, first, first + count).contiguous().to(device),
          y.slice(0, first, first + count).contiguous().to(device)};
}

inline std::unique_ptr<optim::Optimizer> dist_adamw(std::vector<Tensor> params) {
  return std::make_unique<optim::AdamW>(std::move(params), 1e-2);
}

// kSteps of training on rows [first, first + count) of each step's batch: `step_fn` runs after
// each backward (an optimizer's step), `compiled` traces the loss with jit::compile.
inline void train_dist_mlp(DistMlp& model, std::int64_t first, std::int64_t count, Device device,
                           bool compiled, const std::function<void()>& step_fn,
                           const std::function<void()>& zero_fn) {
  jit::CompileOptions options;
  options.modules = {&model};
  auto loss_fn = [&](const Tensor& x, const Tensor& y) { return mse_loss(model.forward(x), y); };
  auto compiled_loss = jit::compile(loss_fn, options);
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = dist_batch(s, first, count, device);
    Tensor loss = compiled ? compiled_loss(x, y) : loss_fn(x, y);
    loss.backward();
    step_fn();
    zero_fn();
  }
}

}  // namespace kiln::test
