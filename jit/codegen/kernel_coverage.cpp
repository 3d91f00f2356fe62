// The templates' coverage from the expression table (see kernel_coverage.h).
#include "jit/codegen/kernel_coverage.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <vector>

#include "jit/codegen/cuda_expr.h"
#include "jit/codegen/kernel_values.h"
#include "jit/codegen/pointwise_indexed.h"

namespace kiln::jit::codegen {
namespace {

class TemplateCoverage final : public graph::KernelCoverage {
 public:
  std::optional<std::string> unrendered_reason(const graph::Graph& g, int n,
                                               graph::FusionKind kind) const override {
    const graph::Node& node = g.nodes.at(n);
    if (node.op == OpId::cat || node.op == OpId::pad) return unrendered_movement(g, n, kind);
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
    if (kind != graph::FusionKind::pointwise && codegen::reads_position(node.op))
      return fmt::format(
          "{} reads its element's row and column, which a kernel with reductions has only for "
          "full values of rows over the trailing dims",
          node.op);
    if (kind != graph::FusionKind::pointwise && codegen::reads_index(node.op))
      return fmt::format(
          "{} reads its element's linear index, which a kernel with reductions has only for "
          "full values of rows over the trailing dims",
          node.op);
    if (kind != graph::FusionKind::pointwise && reports_errors(node.op, t))
      return fmt::format("{} ({}) reports errors through a flag, which only pointwise kernels take",
                         node.op, dtype_name(t));
    return std::nullopt;
  }

  // Pointwise kernels apply views on the host, to the tensors they read, and render a slice,
  // permute or unit reshape of a value they compute as an index map; a reduction kernel takes a
  // reshape that only adds or drops dims of size 1 of a value it computes.
  std::optional<std::string> unrendered_view(const graph::Graph& g, int n,
                                             graph::FusionKind kind) const override {
    const graph::Node& node = g.nodes.at(n);
    if (kind != graph::FusionKind::pointwise && is_unit_reshape(g, n)) return std::nullopt;
    if (kind == graph::FusionKind::pointwise && renders_view_by_index(g, n)) return std::nullopt;
    if (kind == graph::FusionKind::pointwise && node.op == OpId::expand)
      return fmt::format(
          "expand of %{}, a value computed in the same kernel, would recompute it for every "
          "element it is broadcast to: the value is written and the view reads it",
          node.inputs.at(0));
    return fmt::format(
        "{} of %{}, a value computed in the same kernel, is not rendered in {} kernels: the "
        "value is written and the view reads it",
        node.op, node.inputs.at(0), graph::fusion_kind_name(kind));
  }

  bool reads_position(const graph::Graph& g, int n) const override {
    return codegen::reads_position(g.nodes.at(n).op);
  }

  bool reads_index(const graph::Graph& g, int n) const override {
    return codegen::reads_index(g.nodes.at(n).op);
  }

 private:
  // cat and pad are index arithmetic in pointwise kernels, which take their symbolic sizes as
  // arguments; anywhere else, or over a size no expression tracks, they run as their own kernel.
  static std::optional<std::string> unrendered_movement(const graph::Graph& g, int n,
                                                        graph::FusionKind kind) {
    const graph::Node& node = g.nodes.at(n);
    if (kind != graph::FusionKind::pointwise)
      return fmt::format("{} is index arithmetic in pointwise kernels only, not in {} kernels",
                         node.op, graph::fusion_kind_name(kind));
    auto tracked = [&](int v) {
      const auto& sizes = g.values[v].sizes;
      return std::none_of(sizes.begin(), sizes.end(),
                          [](const SymExpr& s) { return s.is_opaque(); });
    };
    bool all = tracked(node.output());
    for (int v : node.inputs) all = all && tracked(v);
    if (!all)
      return fmt::format(
          "{} over a size no expression tracks copies with index arithmetic: a kernel of its own",
          node.op);
    return std::nullopt;
  }
};

}  // namespace

const graph::KernelCoverage& kernel_coverage() {
  static const TemplateCoverage coverage;
  return coverage;
}

}  // namespace kiln::jit::codegen
