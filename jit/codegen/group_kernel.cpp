// Rendering a fusion group into its kernel and launching it (see group_kernel.h).
#include "jit/codegen/group_kernel.h"

#include <fmt/format.h>

#include "runtime/log.h"

namespace kiln::jit::codegen {
namespace {

std::variant<PointwiseKernel, ReductionKernel> render(const graph::Graph& g,
                                                      const graph::FusionGroup& group,
                                                      std::span<const std::int64_t> order) {
  if (group.kind == graph::FusionKind::pointwise) return render_pointwise(g, group, order);
  return render_reduction(g, group);
}

}  // namespace

GroupKernel::GroupKernel(const graph::Graph& g, const graph::FusionGroup& group,
                         std::span<const std::int64_t> order)
    : kernel_(render(g, group, order)) {
  if (const auto* p = std::get_if<PointwiseKernel>(&kernel_))
    pointwise_ = KernelHandle(p->name, p->source);
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
  const auto* r = std::get_if<ReductionKernel>(&kernel_);
  if (!r) return pointwise_;
  ReductionVariant v = expected_variant(*r, schedule_limits());
  if (!r->variants.rendered(v.index()) && log_enabled(LogTopic::kernels))
    log_line(
        fmt::format("kiln: kernel {}: expected schedule {} at the traced sizes", r->name, v.str()));
  return reduction_variant_kernel(*r, v);
}

std::vector<Tensor> GroupKernel::run(const graph::Graph& g, const Shape& domain,
                                     std::vector<Tensor>& values,
                                     std::span<const std::int64_t> symbol_values,
                                     OutputBuffers into,
                                     std::span<const std::int64_t> order) const {
  if (const auto* p = std::get_if<PointwiseKernel>(&kernel_))
    return run_pointwise(g, *p, domain, values, symbol_values, &pointwise_, into, order);
  KILN_CHECK(order.empty(), "codegen: reduction kernel '{}' walks its domain in its own order",
             name());
  return run_reduction(g, std::get<ReductionKernel>(kernel_), domain, values, symbol_values, into);
}

}  // namespace kiln::jit::codegen
