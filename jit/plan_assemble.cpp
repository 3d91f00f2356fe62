// The last build phase: each group's typed step, made once from the phases' decisions (see
// plan_build.h). The notes are what KernelPlan::str() prints.
#include <fmt/format.h>

#include "jit/codegen/attention.h"
#include "jit/codegen/epilogue_lowering.h"
#include "jit/codegen/skinny_gemm.h"
#include "jit/plan_build.h"

namespace kiln::jit::plan_build {

namespace {

// What the earlier phases decided, for every group.
struct Decisions {
  const graph::Graph& g;
  const graph::Partition& p;
  std::vector<std::optional<codegen::GroupKernel>>& kernels;
  const Placements& placements;
  const LibraryCalls& library;
  std::vector<int> position;  // per group: its position in the plan
};

StepAction kernel_action(Decisions& d, int group, std::string& note) {
  const graph::FusionGroup& fg = d.p.groups[group];
  KernelStep step{std::move(*d.kernels[group]), fg.domain, std::nullopt, {}};
  Shape sizes;
  for (const auto& s : fg.domain)
    if (s.is_constant())
      if (auto v = s.evaluate({})) sizes.push_back(*v);
  if (sizes.size() == fg.domain.size()) step.static_domain = std::move(sizes);
  note = step.kernel.description(fg);
  return step;
}

std::string eager_note(const graph::FusionGroup& fg) {
  return fmt::format("eager {} (a {} op: one generated kernel or library call of its own)", fg.name,
                     graph::fusion_kind_name(fg.kind));
}

StepAction matmul_action(Decisions& d, int group, std::string& note) {
  if (const auto& skinny = d.library.skinny_of_group[group]) {
    note = "kernel " + skinny->kernel.name() + ", " + skinny->note;
    return SkinnyGemmStep{skinny};
  }
  const auto& lowering = d.library.of_group[group];
  if (!lowering) {
    note = eager_note(d.p.groups[group]);
    return EagerStep{};
  }
  note = "library " + lowering->note;
  std::vector<int> absorbs = {d.position[lowering->epilogue_group]};
  if (lowering->widening_group >= 0) absorbs.push_back(d.position[lowering->widening_group]);
  return LibraryStep{std::make_shared<const codegen::EpilogueLowering>(*lowering),
                     std::move(absorbs)};
}

// The tiles the group's attention kernel takes on this device, as explain() shows them.
std::string attention_tiles(const graph::Graph& g, const graph::FusionGroup& fg) {
  for (int n : fg.nodes) {
    const graph::Node& node = g.nodes[n];
    if (op_class(node.op) != OpClass::attention || node.inputs.size() < 3) continue;
    if (!g.values[node.inputs[0]].device.is_cuda()) return "";
    const auto& q = g.values[node.inputs[0]].meta;
    const auto& v = g.values[node.inputs[2]].meta;
    if (q.shape.empty() || v.shape.empty()) return "";
    return codegen::attention_tiles_note(q.dtype, static_cast<int>(q.shape.back()),
                                         static_cast<int>(v.shape.back()),
                                         node.op == OpId::attention_backward);
  }
  return "";
}

StepAction attention_action(Decisions& d, int group, std::string& note) {
  note = eager_note(d.p.groups[group]);
  if (std::string tiles = attention_tiles(d.g, d.p.groups[group]); !tiles.empty())
    note += " [" + tiles + "]";
  const auto& placement = d.placements.of_group[group];
  if (placement) note += " [" + placement->str(d.g) + "]";
  return AttentionStep{placement};
}

StepAction eager_action(Decisions& d, int group, std::string& note) {
  note = eager_note(d.p.groups[group]);
  int joined = d.placements.joined_value[group];
  if (joined >= 0)
    note += " [made by the attention backward's placed gradients unless it falls back]";
  return EagerStep{joined};
}

StepAction action_of(Decisions& d, int group, std::string& note) {
  const graph::FusionGroup& fg = d.p.groups[group];
  if (int by = d.library.skinny_absorbed_by[group]; by >= 0) {
    note = fmt::format("{} {}: computed by the skinny GEMM of group {}",
                       graph::fusion_kind_name(fg.kind), fg.name, by);
    return AbsorbedStep{by};
  }
  switch (fg.kind) {
    case graph::FusionKind::pointwise:
    case graph::FusionKind::reduction:
    case graph::FusionKind::normalization:
      return kernel_action(d, group, note);
    case graph::FusionKind::view:
      note = fmt::format("host view {}", fg.name);
      return HostViewStep{};
    // The fuser made it a group of its own because no template renders it.
    case graph::FusionKind::unrendered:
      note = fmt::format("fallback {}: {}", fg.name, fg.unrendered);
      return FallbackStep{fg.unrendered};
    case graph::FusionKind::matmul:
      return matmul_action(d, group, note);
    case graph::FusionKind::attention:
      return attention_action(d, group, note);
    case graph::FusionKind::index:
    case graph::FusionKind::scan:
    case graph::FusionKind::sort:
    case graph::FusionKind::cached_attention:
    case graph::FusionKind::movement:
    case graph::FusionKind::transfer:
      return eager_action(d, group, note);
  }
  return FallbackStep{fg.unrendered};
}

}  // namespace

std::vector<PlanStep> assemble_steps(const graph::Graph& g, const graph::Partition& p,
                                     const std::vector<int>& order,
                                     std::vector<std::optional<codegen::GroupKernel>>& kernels,
                                     const Placements& placements, const LibraryCalls& library,
                                     Releases releases) {
  Decisions d{g, p, kernels, placements, library, std::vector<int>(p.groups.size(), -1)};
  for (std::size_t i = 0; i < order.size(); ++i) d.position[order[i]] = static_cast<int>(i);
  std::vector<PlanStep> steps;
  steps.reserve(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    int group = order[i];
    std::string note;
    StepAction action = action_of(d, group, note);
    if (int matmul = library.absorbed_by[group]; matmul >= 0)
      note += " [computed by the cuBLASLt epilogue of group " + std::to_string(matmul) +
              " unless it falls back]";
    steps.push_back(PlanStep{group,
                             p.groups[group].nodes,
                             std::move(note),
                             std::move(releases.at[i]),
                             std::move(action),
                             {}});
  }
  // A skinny GEMM reads the graph input its weight's cast read: what that step would drop drops
  // after the GEMM.
  for (std::size_t i = 0; i < order.size(); ++i)
    if (int by = library.skinny_absorbed_by[order[i]];
        by >= 0 && d.position[by] > static_cast<int>(i)) {
      auto& to = steps[d.position[by]].releases;
      to.insert(to.end(), steps[i].releases.begin(), steps[i].releases.end());
      steps[i].releases.clear();
    }
  return steps;
}

}  // namespace kiln::jit::plan_build
