// The capture blockers of a plan's steps (plan_capture.h).
#include "jit/plan_capture.h"

#include <fmt/format.h>

#include <algorithm>

namespace kiln::jit::plan_build {

namespace {

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

// Allocations are no blocker: during a capture they come from the graph's pool
// (runtime/cuda/allocator.h), and a checked kernel's flag from the graph's own buffer
// (runtime/device_checks.h).
std::string blocker_of(const graph::Graph& g, const PlanStep& step) {
  if (const auto* f = step.as<FallbackStep>())
    return "runs through dispatch: no template renders it (" + f->reason + ")";
  for (int n : step.nodes)
    if (std::string why = transfer_blocker(g, g.nodes[n]); !why.empty()) return why;
  return "";
}

}  // namespace

void mark_capture_blockers(const graph::Graph& g, std::vector<PlanStep>& steps) {
  for (PlanStep& step : steps) step.capture_blocker = blocker_of(g, step);
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
