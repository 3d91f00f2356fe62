// Running a compiled function's forward and backward plans.
#include "jit/aot/aot_program.h"

#include "autograd/grad_ready.h"
#include "autograd/node.h"
#include "graph/node_values.h"
#include "jit/codegen/kernel_coverage.h"
#include "jit/cuda_graphs.h"
#include "jit/plan_outputs.h"
#include "runtime/grad_mode.h"

namespace kiln::jit {

// The backward of one call of a compiled function: one node for the whole function, taking one
// gradient per output and giving one per grad target.
class CompiledFunctionBackward : public autograd::Node {
 public:
  CompiledFunctionBackward(std::shared_ptr<const AotProgram> program, std::span<const Tensor> saved,
                           std::span<const Tensor> outputs,
                           std::span<const std::int64_t> symbol_values)
      : Node(outputs.size()),
        program_(std::move(program)),
        symbol_values_(symbol_values.begin(), symbol_values.end()) {
    for (const auto& t : saved) saved_.push_back(autograd::SavedTensor::input(t, true));
    for (const auto& t : outputs) output_meta_.push_back({t.impl().shape, t.dtype()});
    device_ = outputs.empty() ? Device::cpu() : outputs[0].device();
  }

  std::string name() const override {
    return fmt::format("CompiledFunctionBackward({})", program_->name_);
  }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    return run_backward(grad_outputs, false);
  }
  // The plan owns the saved tensors then, and frees each after its last reader.
  std::vector<Tensor> backward_releasing(std::vector<Tensor>&& grad_outputs) override {
    return run_backward(std::move(grad_outputs), true);
  }

  void release_saved() override {
    for (auto& s : saved_) s.release();
  }

 private:
  std::vector<Tensor> run_backward(std::vector<Tensor> grad_outputs, bool releasing) {
    KILN_CHECK_AS(AutogradError, !grad_enabled(),
                  "backward: '{}' is a compiled function, and its compiled backward records no "
                  "history: double backward (create_graph=true) through it is not supported; "
                  "call the function uncompiled where second derivatives are needed",
                  program_->name_);
    const auto& sources = program_->partition_.gradient_sources;
    std::vector<bool> reached(sources.size());
    for (std::size_t j = 0; j < sources.size(); ++j) {
      reached[j] = sources[j].empty();
      for (int k : sources[j])
        reached[j] = reached[j] || (static_cast<std::size_t>(k) < grad_outputs.size() &&
                                    grad_outputs[k].defined());
    }
    std::vector<Tensor> inputs;
    for (const auto& s : saved_) inputs.push_back(s.unpack(*this));
    // Tangents as the backward graph was traced: contiguous, of the output's dtype, and zeros
    // for an output no gradient reached.
    for (std::size_t k = 0; k < output_meta_.size(); ++k) {
      if (!program_->output_requires_grad_[k]) continue;
      const auto& [shape, dtype] = output_meta_[k];
      Tensor g = k < grad_outputs.size() ? std::move(grad_outputs[k]) : Tensor();
      if (!g.defined()) {
        g = zeros(shape, dtype, device_);
      } else {
        KILN_CHECK_AS(ShapeError, g.impl().shape == shape,
                      "backward: '{}' output {} has shape {} but its gradient has shape {}",
                      program_->name_, k, shape_str(shape), shape_str(g.impl().shape));
        if (g.dtype() != dtype) g = g.to(dtype);
        if (!g.is_contiguous()) g = g.contiguous();
      }
      inputs.push_back(std::move(g));
    }
    // Released once the tangents are checked: a backward retried after their error still has them.
    if (releasing) release_saved();
    std::vector<CallArg> args;
    for (const auto& t : inputs) args.push_back({true, &t, 0.0});
    // Each gradient is final once its step has run: a data-parallel reduction of it can start
    // while the plan makes the others (autograd/grad_ready.h).
    auto ready = [&](std::size_t j, const Tensor& g) {
      if (j < reached.size() && reached[j]) autograd::report_gradient_early(j, g);
    };
    // Unobserved (no data-parallel wrapper), the plan runs without finding its outputs' steps.
    const OutputReady on_output =
        autograd::gradients_observed() ? OutputReady(ready) : OutputReady();
    const std::span<Tensor> given_up = releasing ? std::span<Tensor>(inputs) : std::span<Tensor>();
    const AotProgram& p = *program_;
    std::vector<Tensor> grads =
        p.backward_graphs_ ? p.backward_graphs_->run(p.backward_plan_, p.partition_.backward, args,
                                                     symbol_values_, on_output, given_up)
                           : run_reporting_outputs(p.backward_plan_, p.partition_.backward, args,
                                                   symbol_values_, on_output, given_up);
    for (std::size_t j = 0; j < grads.size(); ++j)
      if (!reached[j]) grads[j] = Tensor();
    return grads;
  }

  std::shared_ptr<const AotProgram> program_;
  std::vector<autograd::SavedTensor> saved_;
  std::vector<std::pair<Shape, DType>> output_meta_;
  Device device_;
  std::vector<std::int64_t> symbol_values_;
};

AotProgram::AotProgram(const JointGraph& joint, std::string function_name)
    : name_(std::move(function_name)),
      output_requires_grad_(joint.output_requires_grad),
      grad_targets_(joint.grad_targets),
      partition_(partition_joint(joint)),
      forward_fusion_(graph::partition(partition_.forward, {}, &codegen::kernel_coverage())),
      backward_fusion_(graph::partition(partition_.backward, {}, &codegen::kernel_coverage())),
      forward_plan_(partition_.forward, forward_fusion_),
      backward_plan_(partition_.backward, backward_fusion_) {}

std::vector<Tensor> AotProgram::run(std::span<const CallArg> args,
                                    std::span<const std::int64_t> symbol_values) const {
  std::vector<Tensor> results =
      forward_graphs_ ? forward_graphs_->run(forward_plan_, partition_.forward, args, symbol_values)
                      : forward_plan_.run(partition_.forward, args, symbol_values);
  std::size_t num_outputs = output_requires_grad_.size();
  std::vector<Tensor> outputs(results.begin(), results.begin() + num_outputs);
  std::span<const Tensor> saved(results.data() + num_outputs, results.size() - num_outputs);
  auto node =
      std::make_shared<CompiledFunctionBackward>(shared_from_this(), saved, outputs, symbol_values);
  std::vector<autograd::Edge> edges;
  for (const auto& target : grad_targets_)
    edges.push_back(autograd::gradient_edge(graph::input_value(target, args)));
  node->set_next_edges(std::move(edges));
  for (std::size_t k = 0; k < num_outputs; ++k) {
    if (!output_requires_grad_[k]) continue;
    // History goes on a fresh alias: the plan may hand back an input, an earlier output or a
    // saved value (which, with the node as its grad_fn, would keep the node alive forever).
    outputs[k] = autograd::without_history(outputs[k]);
    autograd::set_history(outputs[k], node, static_cast<std::uint32_t>(k));
  }
  return outputs;
}

void AotProgram::use_cuda_graphs(int limit, const std::string& refusal) {
  forward_graphs_ = std::make_shared<PlanGraphs>(limit, refusal);
  backward_graphs_ = std::make_shared<PlanGraphs>(limit, refusal);
  backward_graphs_->read_in_place_from(forward_graphs_.get());
}

std::string AotProgram::str() const {
  return fmt::format(
             "{}forward fusion plan:\n{}forward launches ({} generated kernels):\n{}"
             "backward fusion plan:\n{}backward launches ({} generated kernels):\n{}",
             partition_.str(), forward_fusion_.str(partition_.forward),
             forward_plan_.kernel_count(), forward_plan_.str(),
             backward_fusion_.str(partition_.backward), backward_plan_.kernel_count(),
             backward_plan_.str()) +
         (forward_graphs_ ? "forward " + forward_graphs_->str() : "") +
         (backward_graphs_ ? "backward " + backward_graphs_->str() : "");
}

}  // namespace kiln::jit
