// A compiled function's training path: the forward and backward graphs of its joint graph, each
// fused and compiled to a KernelPlan, and the one autograd node a call's outputs hang from,
// whose backward runs the backward plan on what the forward saved.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "graph/fusion.h"
#include "jit/aot/partition.h"
#include "jit/call_args.h"
#include "jit/kernel_plan.h"

namespace kiln::jit {

class PlanGraphs;  // cuda_graphs.h

class AotProgram : public std::enable_shared_from_this<AotProgram> {
 public:
  // Partitions `joint` and compiles both graphs.
  AotProgram(const JointGraph& joint, std::string function_name);

  // Runs the forward plan; outputs that carry gradients share one autograd node. The program
  // must be owned by a shared_ptr (the node keeps it alive).
  std::vector<Tensor> run(std::span<const CallArg> args,
                          std::span<const std::int64_t> symbol_values) const;

  const AotPartition& partition() const { return partition_; }
  const KernelPlan& forward_plan() const { return forward_plan_; }
  const KernelPlan& backward_plan() const { return backward_plan_; }
  const graph::Partition& forward_fusion() const { return forward_fusion_; }
  const graph::Partition& backward_fusion() const { return backward_fusion_; }
  // Both graphs, their fusion and launches (explain()), and their CUDA graphs.
  std::string str() const;

  // Replays both plans as CUDA graphs (jit/cuda_graphs.h), the backward reading what the
  // forward's graph saved in place; `refusal`: why the forward may not (random draws), or empty.
  void use_cuda_graphs(int limit, const std::string& refusal);
  const PlanGraphs* forward_graphs() const { return forward_graphs_.get(); }
  const PlanGraphs* backward_graphs() const { return backward_graphs_.get(); }

 private:
  friend class CompiledFunctionBackward;
  std::string name_;
  std::vector<bool> output_requires_grad_;
  std::vector<graph::Input> grad_targets_;
  AotPartition partition_;
  graph::Partition forward_fusion_, backward_fusion_;
  KernelPlan forward_plan_, backward_plan_;
  std::shared_ptr<PlanGraphs> forward_graphs_, backward_graphs_;  // null: no CUDA graphs
};

}  // namespace kiln::jit
