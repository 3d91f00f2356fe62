// The templates' coverage from the expression table (see kernel_coverage.h).
#include "jit/codegen/kernel_coverage.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "jit/codegen/cuda_expr.h"
#include "jit/codegen/kernel_values.h"

namespace kiln::jit::codegen {
namespace {

class TemplateCoverage final : public graph::KernelCoverage {
 public:
  std::optional<std::string> unrendered_reason(const graph::Graph& g, int n,
                                               graph::FusionKind kind) const override {
    const graph::Node& node = g.nodes.at(n);
    // Reductions and normalizations: every one the table has is rendered by its templates.
    if (graph::fusion_class(g, node) != OpClass::elementwise) return std::nullopt;
    std::vector<DType> in_types;
    std::vector<std::string> in_names, args;
    for (int v : node.inputs) {
      in_types.push_back(g.values[v].meta.dtype);
      in_names.emplace_back(dtype_name(in_types.back()));
      args.push_back(fmt::format("v{}", v));
    }
    DType out = g.values[node.output()].meta.dtype;
    DType t = compute_dtype_of(node.op, in_types, out);
    if (!elementwise_expr(node.op, node.attrs, t, args))
      return fmt::format("{} ({} -> {}) has no CUDA expression{}: it runs alone, as an eager op",
                         node.op, fmt::join(in_names, ", "), dtype_name(out),
                         t == out ? "" : fmt::format(" in {}", dtype_name(t)));
    if (kind != graph::FusionKind::pointwise && reads_position(node.op))
      return fmt::format(
          "{} reads its element's row and column, which only pointwise kernels provide", node.op);
    if (kind != graph::FusionKind::pointwise && reports_errors(node.op, t))
      return fmt::format("{} ({}) reports errors through a flag, which only pointwise kernels take",
                         node.op, dtype_name(t));
    return std::nullopt;
  }

  // Pointwise kernels apply views on the host, to the tensors they read; a reduction kernel
  // also takes a reshape that only adds or drops dims of size 1 of a value it computes.
  std::optional<std::string> unrendered_view(const graph::Graph& g, int n,
                                             graph::FusionKind kind) const override {
    const graph::Node& node = g.nodes.at(n);
    if (kind != graph::FusionKind::pointwise && is_unit_reshape(g, n)) return std::nullopt;
    return fmt::format(
        "{} of %{}, a value computed in the same kernel, is not rendered in {} kernels: the "
        "value is written and the view reads it",
        node.op, node.inputs.at(0), graph::fusion_kind_name(kind));
  }
};

}  // namespace

const graph::KernelCoverage& kernel_coverage() {
  static const TemplateCoverage coverage;
  return coverage;
}

}  // namespace kiln::jit::codegen
