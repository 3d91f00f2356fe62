// The zoo's training step, one for every model: the model's loss over one or more micro-batches
// (gradients accumulate), each backward outside autocast, then AdamW. The loss is called directly
// (eager) or through jit::compile with the model declared as its state, as demos/gpt_model.h's
// Trainer does; a model is any nn::Module with `Tensor loss(inputs, targets) const`.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "autograd/nn.h"
#include "autograd/optim.h"
#include "demos/zoo/batch.h"
#include "jit/compile.h"
#include "runtime/autocast.h"

namespace kiln::zoo {

struct TrainOptions {
  double lr = 1e-2;
  double weight_decay = 0.01;
  // The forward and the loss run under autocast(*autocast); parameters and gradients stay as built.
  std::optional<DType> autocast;
  bool compiled = false;
  // Micro-batches per step (gradient accumulation): each loss is scaled by 1 / micro_batches
  // inside the loss function, so the gradients sum to those of the mean.
  std::int64_t micro_batches = 1;
  std::string name = "zoo_loss";  // the compiled function's name (KILN_LOG, kernel names)
  // Compiled calls that need no gradients (eval) replay CUDA graphs (jit::CompileOptions).
  bool cuda_graphs = false;
};

// Holds the model by reference (build it first, convert or move it, then the trainer: AdamW holds
// the parameter tensors). Not copyable or movable: the loss function refers to members.
template <typename Model>
class Trainer {
 public:
  Trainer(Model& model, const TrainOptions& options)
      : options_(options),
        model_(model),
        optimizer_(model.parameters(), options.lr, 0.9, 0.95, 1e-8, options.weight_decay) {
    KILN_CHECK(options.micro_batches >= 1, "zoo::Trainer: micro_batches is {}, not at least 1",
               options.micro_batches);
    auto loss = [this](const Tensor& inputs, const Tensor& targets) {
      Tensor l = model_.loss(inputs, targets);
      return options_.micro_batches == 1 ? l : l * (1.0 / options_.micro_batches);
    };
    if (options.compiled) {
      jit::CompileOptions compile_options;
      compile_options.name = options.name;
      compile_options.arg_names = {"inputs", "targets"};
      compile_options.modules = {&model_};
      compile_options.cuda_graphs = options.cuda_graphs;
      auto fn = jit::compile(loss, compile_options);
      compiled_ = &fn.core();
      loss_ = std::move(fn);
    } else {
      loss_ = loss;
    }
  }
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One step over the micro-batches (options.micro_batches of them, on the model's device):
  // returns the mean of their losses.
  double step(const std::vector<Batch>& micro_batches) {
    double total = 0;
    for (const Tensor& loss : forward_backward(micro_batches)) total += loss.item();
    optimizer_step();
    return total;
  }
  // Zeroes the gradients, then forward and backward per micro-batch; the gradients are those of
  // the mean loss. Returns each micro-batch's scaled loss, on the device, summed by no kernel.
  std::vector<Tensor> forward_backward(const std::vector<Batch>& micro_batches) {
    KILN_CHECK(static_cast<std::int64_t>(micro_batches.size()) == options_.micro_batches,
               "zoo::Trainer: a step of {} micro-batches, configured for {}", micro_batches.size(),
               options_.micro_batches);
    optimizer_.zero_grad();
    std::vector<Tensor> losses;
    for (const Batch& b : micro_batches) {
      Tensor loss = forward(b);
      loss.backward();
      losses.push_back(loss.detach());
    }
    return losses;
  }
  // The scaled loss of one micro-batch, under autocast if configured.
  Tensor forward(const Batch& b) {
    AutocastScope scope(options_.autocast.value_or(DType::bf16), options_.autocast.has_value());
    return loss_(b.inputs, b.targets);
  }
  void optimizer_step() { optimizer_.step(); }

  Model& model() { return model_; }
  // The compiled function's core (entries, plans, stats), or null when eager.
  const jit::CompiledFunctionCore* compiled() const { return compiled_; }

 private:
  TrainOptions options_;
  Model& model_;
  optim::AdamW optimizer_;
  std::function<Tensor(const Tensor&, const Tensor&)> loss_;
  const jit::CompiledFunctionCore* compiled_ = nullptr;
};

}  // namespace kiln::zoo
