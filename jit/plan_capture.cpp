// The capture blockers of a plan's steps (plan_capture.h).
#include "jit/plan_capture.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace kiln::jit::plan_build {

namespace {

// The values a kernel or combo step writes that have neither an arena buffer nor an input's
// memory: each allocated from the caching allocator per call.
std::vector<std::string> allocated_writes(const PlanStep& step, const BufferAssignment& buffers) {
  std::vector<std::string> names;
  for (int v : kernel_writes(step))
    if (buffers.buffer_of(v) < 0 && buffers.written_into(v) < 0)
      names.push_back(fmt::format("%{}", v));
  return names;
}

std::string kernel_blocker(const codegen::GroupKernel& k) {
  const auto* p = k.pointwise();
  const auto* r = k.reduction();
  if ((p && p->checks_errors) || (r && r->checks_index))
    return fmt::format("{} reports errors through a device-check flag reserved per launch",
                       k.name());
  if (r && r->splittable)
    return fmt::format("{} may split its rows over blocks, with scratch allocated per launch",
                       k.name());
  return "";
}

// Whether `v` or a view of it is an output of `g` or written in place.
bool written_or_returned(const graph::Graph& g, int v) {
  std::vector<bool> alias(g.values.size(), false);
  alias[v] = true;
  for (const auto& n : g.nodes)
    if (op_class(n.op) == OpClass::view && alias[n.inputs.at(0)])
      for (int out : n.outputs) alias[out] = true;
  for (int out : g.outputs)
    if (alias[out]) return true;
  return std::find(g.mutated_inputs.begin(), g.mutated_inputs.end(), v) != g.mutated_inputs.end();
}

// A transfer of a graph input on the host reads the plan's device copy of it: a copy on the
// device where the plan keeps that copy, an upload per call where it does not.
std::string transfer_blocker(const graph::Graph& g, const graph::Node& node) {
  if (op_class(node.op) != OpClass::transfer) return "";
  const int v = node.inputs.at(0);
  if (g.values[v].producer >= 0)
    return fmt::format("transfers %{}, which it computes, to {}", v,
                       g.values[node.output()].device.str());
  if (!g.values[v].device.is_cpu()) return "";
  for (const auto& in : g.inputs)
    if (in.value == v && !keeps_upload(g, in))
      return fmt::format("uploads %{} ('{}') from the host on every call", v, in.name);
  return "";
}

std::string blocker_of(const graph::Graph& g, const PlanStep& step,
                       const BufferAssignment& buffers) {
  if (const auto* f = step.as<FallbackStep>())
    return "runs through dispatch: no template renders it (" + f->reason + ")";
  if (step.as<HostViewStep>()) {
    // A reshape of a value traced non-contiguous may find no strides that express it (placement
    // can make the value contiguous at run time), and then copies.
    for (int n : step.nodes)
      if (g.nodes[n].op == OpId::reshape &&
          g.values[g.nodes[n].inputs.at(0)].strides != StrideClass::contiguous)
        return fmt::format("reshape %{} may copy, allocating outside the arena",
                           g.nodes[n].output());
    return "";
  }
  for (int n : step.nodes)
    if (std::string why = transfer_blocker(g, g.nodes[n]); !why.empty()) return why;
  if (step.as<KernelStep>() || step.as<ComboStep>()) {
    if (const auto* k = step.as<KernelStep>())
      if (std::string why = kernel_blocker(k->kernel); !why.empty()) return why;
    if (const auto* c = step.as<ComboStep>())
      for (const auto& m : c->members)
        if (std::string why = kernel_blocker(m.kernel); !why.empty()) return why;
    auto names = allocated_writes(step, buffers);
    if (names.empty()) return "";
    return fmt::format(
        "allocates {} outside the arena (an output of the plan, or a value of "
        "a size no expression tracks)",
        fmt::join(names, ", "));
  }
  if (step.as<LibraryStep>())
    return "allocates its output and cuBLASLt's workspace outside the arena per call";
  if (step.as<AttentionStep>()) return "allocates its outputs outside the arena per call";
  return "allocates its outputs outside the arena per call (eager ops)";
}

}  // namespace

void mark_capture_blockers(const graph::Graph& g, std::vector<PlanStep>& steps,
                           const BufferAssignment& buffers) {
  for (PlanStep& step : steps) step.capture_blocker = blocker_of(g, step, buffers);
  // A step a library call computes never runs: the call's own blocker stands for it.
  for (const PlanStep& step : steps)
    if (const auto* l = step.as<LibraryStep>())
      for (int absorbed : l->absorbs)
        steps.at(static_cast<std::size_t>(absorbed)).capture_blocker.clear();
}

bool keeps_upload(const graph::Graph& g, const graph::Input& in) {
  return in.kind == graph::InputKind::constant && g.values[in.value].device.is_cpu() &&
         !written_or_returned(g, in.value);
}

}  // namespace kiln::jit::plan_build
