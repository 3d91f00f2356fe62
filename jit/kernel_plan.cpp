// Building a plan from its phases (plan_build.h), and what it reports (see kernel_plan.h).
#include "jit/kernel_plan.h"

#include <fmt/format.h>

#include <set>

#include "jit/codegen/kernel_cache.h"
#include "jit/plan_build.h"
#include "runtime/log.h"

namespace kiln::jit {

KernelPlan::KernelPlan(const graph::Graph& g, const graph::Partition& partition) {
  using namespace plan_build;
  auto kernels = render_kernels(g, partition);
  Placements placements = place_attention_outputs(g, partition);
  LibraryCalls library = plan_library_calls(g, partition);
  std::vector<int> order = order_groups(partition, library);
  if (log_enabled(LogTopic::fusion))
    for (const auto& line : library.log) log_line(line);
  Releases releases = plan_releases(g, partition, order);
  peak_bytes_ = releases.peak_bytes;
  total_bytes_ = releases.total_bytes;
  steps_ = assemble_steps(g, partition, order, kernels, placements, library, std::move(releases));
  std::vector<std::string> combined;
  steps_ = combine_kernels(g, std::move(steps_), combined);
  if (log_enabled(LogTopic::fusion))
    for (const auto& line : combined) log_line(line);
  // Compile (or load from the disk cache) every kernel now rather than at each first launch:
  // one progress bar for the lot, and the first call's launches run back to back.
  std::vector<const codegen::KernelHandle*> handles;
  for (const auto& s : steps_)
    if (const auto* k = s.as<KernelStep>()) {
      handles.push_back(&k->kernel.expected_kernel());
    } else if (const auto* c = s.as<ComboStep>()) {
      handles.push_back(&c->kernel->handle);  // the members compile only where a call refuses it
    }
  if (!handles.empty()) codegen::prepare_kernels(handles);
}

int KernelPlan::kernel_count() const {
  std::set<int> absorbed;
  for (const auto& s : steps_)
    if (const auto* l = s.as<LibraryStep>()) absorbed.insert(l->absorbs);
  int n = 0;
  for (std::size_t i = 0; i < steps_.size(); ++i)
    n += (steps_[i].as<KernelStep>() && !absorbed.contains(static_cast<int>(i))) ||
         steps_[i].as<ComboStep>();
  return n;
}

int KernelPlan::kernel_steps() const {
  int n = 0;
  for (const auto& s : steps_) n += !s.as<HostViewStep>() && !s.as<FallbackStep>();
  return n;
}

int KernelPlan::fallback_steps() const {
  int n = 0;
  for (const auto& s : steps_) n += s.as<FallbackStep>() != nullptr;
  return n;
}

std::string KernelPlan::str() const {
  std::string out;
  for (const auto& s : steps_) out += fmt::format("  group {}: {}\n", s.group, s.note);
  return out;
}

}  // namespace kiln::jit
