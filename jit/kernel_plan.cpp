// Building a plan from its phases (plan_build.h), and what it reports (see kernel_plan.h).
#include "jit/kernel_plan.h"

#include <fmt/format.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>

#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/skinny_gemm.h"
#include "jit/eager_ops.h"
#include "jit/plan_arena.h"
#include "jit/plan_build.h"
#include "jit/plan_capture.h"
#include "runtime/log.h"

namespace kiln::jit {

KernelPlan::KernelPlan(const graph::Graph& g, const graph::Partition& partition) {
  using namespace plan_build;
  LibraryCalls library = plan_library_calls(g, partition);
  auto kernels = render_kernels(g, partition, library);
  Placements placements = place_attention_outputs(g, partition);
  std::vector<int> order = order_groups(partition, library);
  if (log_enabled(LogTopic::fusion))
    for (const auto& line : library.log) log_line(line);
  Releases releases = plan_releases(g, partition, order);
  peak_bytes_ = releases.peak_bytes;
  total_bytes_ = releases.total_bytes;
  steps_ = assemble_steps(g, partition, order, kernels, placements, library, std::move(releases));
  run_time_fallbacks_ = std::make_shared<RunTimeFallbacks>();
  std::vector<std::string> combined;
  place_kernel_outputs(g, partition, steps_, combined);
  steps_ = combine_kernels(g, std::move(steps_), combined);
  if (log_enabled(LogTopic::fusion))
    for (const auto& line : combined) log_line(line);
  buffers_ = std::make_shared<const BufferAssignment>(g, steps_);
  arena_ = std::make_shared<PlanArena>(buffers_);
  mark_capture_blockers(g, steps_);
  host_inputs_ = std::make_shared<HostInputs>(g);
  node_kernels_ = std::make_shared<NodeKernels>(g.nodes.size());
  for (const graph::Symbol& s : g.symbols) traced_symbols_.push_back(s.traced);
  // Compile (or load from the disk cache) every kernel now rather than at each first launch:
  // one progress bar for the lot, and the first call's launches run back to back.
  std::vector<const codegen::KernelHandle*> handles;
  for (const auto& s : steps_)
    if (const auto* k = s.as<KernelStep>()) {
      handles.push_back(&k->kernel.expected_kernel());
    } else if (const auto* skinny = s.as<SkinnyGemmStep>()) {
      handles.push_back(&skinny->gemm->kernel);
    } else if (const auto* c = s.as<ComboStep>()) {
      handles.push_back(&c->kernel->handle);  // the members compile only where a call refuses it
    }
  if (!handles.empty()) codegen::prepare_kernels(handles);
}

int KernelPlan::kernel_count() const {
  std::set<int> absorbed;
  for (const auto& s : steps_)
    if (const auto* l = s.as<LibraryStep>()) absorbed.insert(l->absorbs.begin(), l->absorbs.end());
  int n = 0;
  for (std::size_t i = 0; i < steps_.size(); ++i)
    n += (steps_[i].as<KernelStep>() && !absorbed.contains(static_cast<int>(i))) ||
         steps_[i].as<ComboStep>() || steps_[i].as<SkinnyGemmStep>();
  return n;
}

int KernelPlan::kernel_steps() const {
  int n = 0;
  for (const auto& s : steps_)
    n += !s.as<HostViewStep>() && !s.as<FallbackStep>() && !s.as<AbsorbedStep>();
  return n;
}

int KernelPlan::fallback_steps() const {
  int n = 0;
  for (const auto& s : steps_) n += s.as<FallbackStep>() != nullptr;
  return n;
}

struct KernelPlan::RunTimeFallbacks {
  std::atomic<bool> any{false};
  std::mutex mutex;
  std::map<std::size_t, std::set<std::string>> reasons;  // by step
};

bool KernelPlan::fell_back_at_run_time() const {
  return run_time_fallbacks_ && run_time_fallbacks_->any.load(std::memory_order_acquire);
}

void KernelPlan::note_run_time_fallback(std::size_t step, const std::string& why) const {
  std::lock_guard lock(run_time_fallbacks_->mutex);
  run_time_fallbacks_->reasons[step].insert(why);
  run_time_fallbacks_->any.store(true, std::memory_order_release);
}

std::string KernelPlan::str() const {
  std::string out;
  std::unique_lock<std::mutex> lock;
  if (run_time_fallbacks_) lock = std::unique_lock(run_time_fallbacks_->mutex);
  const ArenaLayout layout = traced_layout();
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    const auto& s = steps_[i];
    out += fmt::format("  group {}: {}\n", s.group, s.note);
    if (std::string buffers = buffers_->step_note(i, layout); !buffers.empty())
      out += fmt::format("    {}\n", buffers);
    if (!s.capture_blocker.empty()) out += fmt::format("    capture: {}\n", s.capture_blocker);
    if (!run_time_fallbacks_) continue;
    auto it = run_time_fallbacks_->reasons.find(i);
    if (it == run_time_fallbacks_->reasons.end()) continue;
    for (const std::string& why : it->second)
      out += fmt::format("    fell back to primitive ops at run time: {}\n", why);
  }
  if (!buffers_->empty()) out += "  " + buffers_->summary(layout) + "\n";
  out += fmt::format("  capture: {} of {} steps could be captured into a CUDA graph as they run\n",
                     capturable_steps(), steps_.size());
  return out;
}

int KernelPlan::capturable_steps() const {
  int n = 0;
  for (const auto& s : steps_) n += s.capture_blocker.empty();
  return n;
}

bool KernelPlan::capturable() const {
  return capturable_steps() == static_cast<int>(steps_.size());
}

struct KernelPlan::HostInputs {
  explicit HostInputs(const graph::Graph& g) {
    for (const auto& in : g.inputs) kept.push_back(plan_build::keeps_upload(g, in));
  }
  struct Uploaded {
    std::shared_ptr<Storage> source;
    std::uint64_t version = 0;
    Tensor device;
  };
  std::vector<bool> kept;  // per input: whether its device copy serves later calls
  std::mutex mutex;
  std::map<std::size_t, Uploaded> by_input;
};

Tensor KernelPlan::device_copy(std::size_t input, const Tensor& host) const {
  if (!host_inputs_->kept.at(input)) return host.to(Device::cuda());
  std::lock_guard lock(host_inputs_->mutex);
  auto& u = host_inputs_->by_input[input];
  const auto& storage = host.impl().storage;
  if (!u.device.defined() || u.source != storage || u.version != storage->version()) {
    u.device = host.to(Device::cuda());
    u.source = storage;
    u.version = storage->version();
  }
  return u.device;
}

std::uintptr_t KernelPlan::last_arena_address() const {
  return arena_->last_address();
}

}  // namespace kiln::jit
