// Rendering a fusion group into its kernel and launching it (see group_kernel.h).
#include "jit/codegen/group_kernel.h"

#include <fmt/format.h>

namespace kiln::jit::codegen {
namespace {

std::variant<PointwiseKernel, ReductionKernel> render(const graph::Graph& g,
                                                      const graph::FusionGroup& group) {
  if (group.kind == graph::FusionKind::pointwise) return render_pointwise(g, group);
  return render_reduction(g, group);
}

}  // namespace

GroupKernel::GroupKernel(const graph::Graph& g, const graph::FusionGroup& group)
    : kernel_(render(g, group)) {
  if (const auto* p = std::get_if<PointwiseKernel>(&kernel_)) {
    handles_[0] = KernelHandle(p->name, p->source);
    return;
  }
  const auto& r = std::get<ReductionKernel>(kernel_);
  for (int v = 0; v < kReductionVariants; ++v) {
    const std::string& source = variant_source(r, v);
    if (!source.empty()) handles_[v] = KernelHandle(r.name, source);
  }
}

const std::string& GroupKernel::name() const {
  return std::visit([](const auto& k) -> const std::string& { return k.name; }, kernel_);
}

std::string GroupKernel::description(const graph::FusionGroup& group) const {
  if (std::holds_alternative<PointwiseKernel>(kernel_))
    return fmt::format("kernel {} (pointwise, {} nodes)", name(), group.nodes.size());
  return fmt::format("kernel {} ({}, {} nodes, {} pass(es))", name(),
                     graph::fusion_kind_name(group.kind), group.nodes.size(),
                     std::get<ReductionKernel>(kernel_).passes);
}

const std::vector<int>& GroupKernel::writes() const {
  return std::visit([](const auto& k) -> const std::vector<int>& { return k.writes; }, kernel_);
}

const std::string& GroupKernel::expected_source() const {
  return expected_kernel().source();
}

const KernelHandle& GroupKernel::expected_kernel() const {
  if (const auto* r = std::get_if<ReductionKernel>(&kernel_)) return handles_[expected_variant(*r)];
  return handles_[0];
}

std::vector<Tensor> GroupKernel::run(const graph::Graph& g, const Shape& domain,
                                     std::vector<Tensor>& values,
                                     std::span<const std::int64_t> symbol_values) const {
  if (const auto* p = std::get_if<PointwiseKernel>(&kernel_))
    return run_pointwise(g, *p, domain, values, symbol_values, &handles_[0]);
  return run_reduction(g, std::get<ReductionKernel>(kernel_), domain, values, symbol_values,
                       &handles_);
}

}  // namespace kiln::jit::codegen
