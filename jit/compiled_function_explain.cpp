// What a compiled function tells about itself: explain() (its entries, guards, plans and why
// calls ran where they did), each entry's graph, fusion, plan and guards, and its counters.
#include <fmt/format.h>

#include "jit/compiled_function.h"
#include "jit/cuda_graphs.h"

namespace kiln::jit {

namespace {
std::string indent(const std::string& text, int by) {
  std::string out, pad(by, ' ');
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out += pad + text.substr(start, end - start) + "\n";
    start = end + 1;
  }
  return out;
}
}  // namespace

std::string CompiledFunctionCore::explain() const {
  std::shared_lock lock(mutex_);
  std::string out = fmt::format(
      "compiled function '{}': {} calls, {} hits, {} compiles, {} eager calls, {} entries\n"
      "ran on: generated kernels for {} calls (forward and backward plans for calls that "
      "need gradients); the reference executor (node by node through autograd: inputs on the "
      "CPU, or a function not compiled for training) for the others\n",
      options_.name, stats_.calls.get(), stats_.hits.get(), stats_.compiles.get(),
      stats_.eager_calls.get(), entries_.size(), stats_.kernel_calls.get());
  if (options_.verify_every > 0)
    out += fmt::format("verifies captures every {} calls ({} so far)\n", options_.verify_every,
                       stats_.verifications.get());
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = *entries_[i];
    out += fmt::format("entry {} ({} hits), traced because: {}\n  guards ({} checks):\n{}", i,
                       e.hits.get(), e.reason, e.guards.count(), indent(e.guards.str(), 2));
    out += "  graph:\n" + indent(e.graph.str(), 4);
    out += "  fusion plan:\n" + indent(e.fusion.str(e.graph), 4);
    if (e.aot)
      out += "  compiled for training (forward + backward):\n" + indent(e.aot->str(), 4);
    else if (!e.aot_fallback.empty())
      out += fmt::format("  runs node by node through autograd: {}\n", e.aot_fallback);
    if (e.plan)
      out += fmt::format(
          "  launches ({} generated kernels; intermediates at the traced sizes: {} bytes at "
          "peak, {} if none were reused):\n{}",
          e.plan->kernel_count(), e.plan->peak_bytes(), e.plan->total_bytes(),
          indent(e.plan->str(), 2));
    if (e.graphs) out += indent(e.graphs->str(), 2);
  }
  return out;
}

std::string CompiledFunctionCore::graph_dot(int entry) const {
  std::shared_lock lock(mutex_);
  KILN_CHECK(!entries_.empty(), "graph_dot: '{}' has not been traced yet", options_.name);
  if (entry < 0) entry = static_cast<int>(entries_.size()) - 1;
  KILN_CHECK_AS(IndexError, entry < static_cast<int>(entries_.size()),
                "graph_dot: entry {} does not exist ('{}' has {})", entry, options_.name,
                entries_.size());
  return entries_[entry]->fusion.dot(entries_[entry]->graph);
}

std::size_t CompiledFunctionCore::num_entries() const {
  std::shared_lock lock(mutex_);
  return entries_.size();
}

const graph::Graph& CompiledFunctionCore::graph(int entry) const {
  std::shared_lock lock(mutex_);
  return entries_.at(entry)->graph;
}

const graph::Partition& CompiledFunctionCore::fusion(int entry) const {
  std::shared_lock lock(mutex_);
  return entries_.at(entry)->fusion;
}

const KernelPlan* CompiledFunctionCore::plan(int entry) const {
  std::shared_lock lock(mutex_);
  const auto& p = entries_.at(entry)->plan;
  return p ? &*p : nullptr;
}

const PlanGraphs* CompiledFunctionCore::graphs(int entry) const {
  std::shared_lock lock(mutex_);
  return entries_.at(entry)->graphs.get();
}

const AotProgram* CompiledFunctionCore::aot(int entry) const {
  std::shared_lock lock(mutex_);
  return entries_.at(entry)->aot.get();
}

const GuardSet& CompiledFunctionCore::guards(int entry) const {
  std::shared_lock lock(mutex_);
  return entries_.at(entry)->guards;
}

std::vector<std::string> CompiledFunctionCore::recompile_reasons() const {
  std::shared_lock lock(mutex_);
  std::vector<std::string> out;
  for (std::size_t i = 1; i < entries_.size(); ++i) out.push_back(entries_[i]->reason);
  return out;
}

CompiledStats CompiledFunctionCore::stats() const {
  CompiledStats s;
  s.calls = stats_.calls.get();
  s.hits = stats_.hits.get();
  s.compiles = stats_.compiles.get();
  s.eager_calls = stats_.eager_calls.get();
  s.verifications = stats_.verifications.get();
  s.kernel_calls = stats_.kernel_calls.get();
  return s;
}

}  // namespace kiln::jit
