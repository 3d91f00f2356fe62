// A fusion group as one generated kernel, however it is scheduled (pointwise, or a row
// reduction with its block, warp and outer variants): what a compiled function's KernelPlan and
// the eager CUDA backend's one-node plans both build, resolve and launch.
#pragma once

#include <span>
#include <string>
#include <variant>
#include <vector>

#include "graph/fusion.h"
#include "graph/graph.h"
#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/pointwise.h"
#include "jit/codegen/reduction.h"

namespace kiln::jit::codegen {

class GroupKernel {
 public:
  // Renders `group` (kind pointwise, reduction or normalization); `order`: a pointwise group's
  // walk order (render_pointwise).
  GroupKernel(const graph::Graph& graph, const graph::FusionGroup& group,
              std::span<const std::int64_t> order = {});

  const std::string& name() const;
  // "kernel k_add_relu (pointwise, 3 nodes)": what a plan's explain() lists.
  std::string description(const graph::FusionGroup& group) const;
  // Whether it iterates over a reduction's input (a row reduction or normalization).
  bool reduces() const { return std::holds_alternative<ReductionKernel>(kernel_); }
  // The pointwise kernel, or null for a reduction.
  const PointwiseKernel* pointwise() const { return std::get_if<PointwiseKernel>(&kernel_); }
  // The reduction kernel, or null for a pointwise one.
  const ReductionKernel* reduction() const { return std::get_if<ReductionKernel>(&kernel_); }
  // Values written, in the order run() returns them.
  const std::vector<int>& writes() const;
  // The source a first call at the traced sizes runs (its handle is the one prepare resolves).
  const std::string& expected_source() const;
  // The handle a first call at the traced sizes launches, to resolve before it.
  const KernelHandle& expected_kernel() const;

  // Runs over `domain` (the group's domain at this call's sizes); see run_pointwise (`order`
  // is a pointwise kernel's alone).
  std::vector<Tensor> run(const graph::Graph& graph, const Shape& domain,
                          std::vector<Tensor>& values, std::span<const std::int64_t> symbol_values,
                          OutputBuffers into = {}, std::span<const std::int64_t> order = {}) const;

 private:
  std::variant<PointwiseKernel, ReductionKernel> kernel_;
  KernelHandle pointwise_;  // a pointwise kernel's one source (a reduction holds its variants)
};

}  // namespace kiln::jit::codegen
