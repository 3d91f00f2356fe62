// A traced graph as launches: per fusion group, a generated kernel (pointwise or row
// reduction), a host-side view, a matmul with its bias and activation as one cuBLASLt call, or
// its nodes one by one as eager CUDA ops (matmul through cuBLASLt; indexing, scans and movement
// each a generated kernel of its own; a node no template renders, with the fuser's reason).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "graph/fusion.h"
#include "graph/graph.h"
#include "jit/call_args.h"
#include "jit/codegen/group_kernel.h"
#include "jit/output_placement.h"

namespace kiln::jit {
namespace codegen {
struct EpilogueLowering;
}

class KernelPlan {
 public:
  // Renders every group it can and makes its kernels ready (from memory, the disk cache, or
  // NVRTC).
  KernelPlan(const graph::Graph& graph, const graph::Partition& partition);

  // Runs the graph on this call's arguments; outputs as the graph returns them. No autograd:
  // calls that need gradients take the reference executor.
  std::vector<Tensor> run(const graph::Graph& graph, std::span<const CallArg> args,
                          std::span<const std::int64_t> symbol_values) const;

  int kernel_count() const;
  // Steps run by a generated kernel, a cuBLASLt call, or an eager CUDA op that is one (matmul,
  // indexing, scan, movement), against fallback steps: a node no template renders, run by
  // dispatch with the fuser's reason. A call with a fallback step is not a kernel call
  // (CompiledStats::kernel_calls).
  int kernel_steps() const;
  int fallback_steps() const;
  // Intermediate bytes alive at once at the traced sizes, with each released after its last
  // reader (peak) and, for comparison, were none released (total).
  std::int64_t peak_bytes() const { return peak_bytes_; }
  std::int64_t total_bytes() const { return total_bytes_; }
  // One line per step: "kernel k_add_relu (pointwise, 3 nodes)", "eager: matmul (why)", ...
  std::string str() const;

 private:
  struct Step {
    enum class Kind { kernel, host, eager, fallback } kind;
    int group = -1;
    std::vector<int> nodes;
    std::vector<SymExpr> domain;
    std::optional<Shape> static_domain;  // `domain` when no size in it is symbolic
    std::optional<codegen::GroupKernel> kernel;
    std::string note;  // what it is, or why code generation does not cover it
    // Values no later step reads: dropped after this one, so that the caching allocator hands
    // their blocks to later kernels.
    std::vector<int> releases;
    // cuBLASLt epilogue lowering: the matmul step makes one library call for this and the
    // epilogue step after it, which then only runs when the call fell back.
    std::shared_ptr<const codegen::EpilogueLowering> lt;
    int absorbed_by = -1;  // the matmul step whose cuBLASLt call computes this step
    int runs_after = -1;   // a group before it in the partition it must follow (a BGRADB sum)
    // An attention step that writes its outputs where their readers want them, and the cat
    // step whose result such a step then made (it is skipped when its value is already there).
    std::optional<OutputPlacement> placement;
    int joins_placed = -1;  // the cat's output value
  };
  void plan_releases(const graph::Graph& graph, const graph::Partition& partition);
  void plan_placements(const graph::Graph& graph);

  std::vector<Step> steps_;
  std::int64_t peak_bytes_ = 0, total_bytes_ = 0;
};

}  // namespace kiln::jit
