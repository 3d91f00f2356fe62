// The combine_kernels phase (plan_build.h): horizontal fusion of independent pointwise kernels.
// One pass over the plan keeps a pending combo. An eligible kernel joins it unless it reads what
// a member writes; other steps run past it (the members move later) until one reads a member's
// output. Then, before it, the combo also takes the later eligible kernels whose inputs are ready
// there (they move earlier), and runs as one launch. The casts of parameters feeding cuBLASLt
// calls (ready at the start, read one by one by the matmuls) and of gradients (read by no later
// step) are what this gathers under autocast.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <set>
#include <string_view>

#include "jit/plan_build.h"

namespace kiln::jit::plan_build {

namespace {

bool combo_enabled() {
  const char* v = std::getenv("KILN_COMBO");
  return !v || std::string_view(v) != "0";
}

const codegen::PointwiseKernel* member_kernel(const PlanStep& step) {
  const auto* k = step.as<KernelStep>();
  // A placed kernel's outputs are not contiguous over its domain, as a member's are.
  const codegen::PointwiseKernel* p = k && k->order.empty() ? k->kernel.pointwise() : nullptr;
  return p && !p->element_source.empty() ? p : nullptr;
}

// A combo member: a pointwise kernel with an element function alone, small at the traced sizes
// (a symbolic domain is taken: run_combo checks each call's sizes).
bool can_join(const PlanStep& step) {
  if (!member_kernel(step)) return false;
  const auto& domain = std::get<KernelStep>(step.action).static_domain;
  return !domain || numel(*domain) <= codegen::kMaxComboMemberElements;
}

// What each step reads from outside itself and writes, by graph value.
struct StepValues {
  std::vector<std::vector<int>> reads, writes;
};

StepValues step_values(const graph::Graph& g, const std::vector<PlanStep>& steps) {
  StepValues sv;
  for (const auto& step : steps) {
    std::set<int> made;
    std::vector<int> writes, reads;
    for (int n : step.nodes)
      for (int v : g.nodes[n].outputs) made.insert(v), writes.push_back(v);
    for (int n : step.nodes)
      for (int v : g.nodes[n].inputs)
        if (!made.contains(v)) reads.push_back(v);
    sv.reads.push_back(std::move(reads));
    sv.writes.push_back(std::move(writes));
  }
  // A library call also reads what the step it computes reads.
  for (const auto& step : steps)
    if (const auto* l = step.as<LibraryStep>())
      for (int absorbed : l->absorbs) {
        auto& reads = sv.reads[&step - steps.data()];
        reads.insert(reads.end(), sv.reads[absorbed].begin(), sv.reads[absorbed].end());
      }
  return sv;
}

class Combiner {
 public:
  Combiner(const graph::Graph& g, std::vector<PlanStep>& steps, std::vector<std::string>& log)
      : g_(g),
        steps_(steps),
        log_(log),
        sv_(step_values(g, steps)),
        emitted_(steps.size()),
        new_position_(steps.size(), -1),
        ready_(g.values.size(), true) {
    for (const auto& writes : sv_.writes)
      for (int v : writes) ready_[v] = false;
    std::set<int> absorbed;
    for (const auto& step : steps)
      if (const auto* l = step.as<LibraryStep>())
        absorbed.insert(l->absorbs.begin(), l->absorbs.end());
    for (std::size_t i = 0; i < steps.size(); ++i)
      eligible_.push_back(can_join(steps[i]) && !absorbed.contains(static_cast<int>(i)));
  }

  std::vector<PlanStep> run() {
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      if (emitted_[i]) {  // moved earlier into a combo: what it dropped drops here still
        auto& to = out_.back().releases;
        to.insert(to.end(), steps_[i].releases.begin(), steps_[i].releases.end());
        continue;
      }
      bool conflicts = reads_pending(i);
      if (eligible_[i]) {
        if (!pending_.empty() && (conflicts || !fits(i))) flush(i);
        add(i);
        continue;
      }
      if (conflicts) flush(i);
      keep_pending_inputs(steps_[i].releases);
      emit(i);
    }
    flush(steps_.size());
    for (auto& step : out_)
      if (auto* l = std::get_if<LibraryStep>(&step.action))
        for (int& absorbed : l->absorbs) absorbed = new_position_[absorbed];
    return std::move(out_);
  }

 private:
  bool reads_pending(std::size_t i) const {
    for (int v : sv_.reads[i])
      if (pending_writes_.contains(v)) return true;
    return false;
  }

  // Whether kernel `i` fits the pending combo's limits.
  bool fits(std::size_t i) const {
    const auto* k = member_kernel(steps_[i]);
    return pending_.size() + 1 <= codegen::kMaxComboMembers &&
           pointers_ + k->reads.size() + k->writes.size() <= codegen::kMaxComboPointers;
  }

  void add(std::size_t i) {
    const auto* k = member_kernel(steps_[i]);
    pending_.push_back(i);
    pointers_ += k->reads.size() + k->writes.size();
    for (int v : sv_.writes[i]) pending_writes_.insert(v);
    for (int v : sv_.reads[i]) pending_reads_.insert(v);
  }

  // A step that runs before the pending combo drops no value a member still reads: the combo
  // drops it.
  void keep_pending_inputs(std::vector<int>& releases) {
    std::erase_if(releases, [&](int v) {
      if (!pending_reads_.contains(v)) return false;
      pending_releases_.push_back(v);
      return true;
    });
  }

  void emit(std::size_t i) {
    for (int v : sv_.writes[i]) ready_[v] = true;
    emitted_[i] = true;
    new_position_[i] = static_cast<int>(out_.size());
    out_.push_back(std::move(steps_[i]));
  }

  // Runs the pending combo before step `at`, with the later kernels ready there.
  void flush(std::size_t at) {
    if (pending_.empty()) return;
    std::size_t deferred = pending_.size();
    for (std::size_t k = at + 1; k < steps_.size(); ++k) {
      if (!eligible_[k] || emitted_[k] || !fits(k)) continue;
      bool ready = true;
      for (int v : sv_.reads[k]) ready = ready && ready_[v];
      if (ready) add(k);
    }
    if (pending_.size() == 1) {
      std::size_t only = pending_[0];
      auto& r = steps_[only].releases;
      r.insert(r.end(), pending_releases_.begin(), pending_releases_.end());
      emit(only);
    } else {
      emit_combo(deferred);
    }
    pending_.clear();
    pending_writes_.clear();
    pending_reads_.clear();
    pending_releases_.clear();
    pointers_ = 0;
  }

  // The first `deferred` members were pending (they move later, and drop what they dropped
  // here); the others move earlier (and drop theirs where they were, run() above).
  void emit_combo(std::size_t deferred) {
    std::vector<const codegen::PointwiseKernel*> kernels;
    for (std::size_t m : pending_) kernels.push_back(member_kernel(steps_[m]));
    ComboStep combo;
    combo.kernel = std::make_shared<const codegen::ComboKernel>(codegen::render_combo(g_, kernels));
    PlanStep step{
        steps_[pending_[0]].group, {}, "", std::move(pending_releases_), HostViewStep{}, {}};
    std::vector<std::string> names;
    for (std::size_t j = 0; j < pending_.size(); ++j) {
      PlanStep& member = steps_[pending_[j]];
      names.push_back(kernels[j]->name + (j < deferred ? "" : " (moved earlier)"));
      if (j < deferred)
        step.releases.insert(step.releases.end(), member.releases.begin(), member.releases.end());
      step.nodes.insert(step.nodes.end(), member.nodes.begin(), member.nodes.end());
      combo.groups.push_back(member.group);
      combo.nodes.push_back(member.nodes);
      combo.members.push_back(std::move(std::get<KernelStep>(member.action)));
      for (int v : sv_.writes[pending_[j]]) ready_[v] = true;
      emitted_[pending_[j]] = true;
    }
    step.note = fmt::format("combo kernel {} ({} pointwise kernels as one launch: {})",
                            combo.kernel->name, pending_.size(), fmt::join(names, ", "));
    log_.push_back(fmt::format("kiln: fusion: '{}' {}", g_.name, step.note));
    step.action = std::move(combo);
    out_.push_back(std::move(step));
  }

  const graph::Graph& g_;
  std::vector<PlanStep>& steps_;
  std::vector<std::string>& log_;
  StepValues sv_;
  std::vector<bool> eligible_, emitted_;
  std::vector<int> new_position_;  // per step of the input: its position in the output
  std::vector<bool> ready_;        // per value: made by a step already in the output (or none)
  std::vector<PlanStep> out_;
  std::vector<std::size_t> pending_;
  std::set<int> pending_writes_, pending_reads_;
  std::vector<int> pending_releases_;
  std::size_t pointers_ = 0;
};

}  // namespace

std::vector<PlanStep> combine_kernels(const graph::Graph& g, std::vector<PlanStep> steps,
                                      std::vector<std::string>& log) {
  if (!combo_enabled()) return steps;
  return Combiner(g, steps, log).run();
}

}  // namespace kiln::jit::plan_build
