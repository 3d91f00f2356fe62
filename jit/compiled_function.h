// The per-function cache of compiled entries (GuardSet -> graph) behind jit::compile: guard
// checking, tracing and retracing with explained reasons, dynamic dims, the recompile limit,
// and verification of captured values.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "graph/fusion.h"
#include "graph/graph.h"
#include "jit/aot/aot_program.h"
#include "jit/call_args.h"
#include "jit/guards.h"
#include "jit/kernel_plan.h"
#include "jit/options.h"

namespace kiln::jit {

struct JointGraph;

// A compiled function captured a tensor or value (not declared state, not an argument) that
// changed since it was traced: the trace still uses the old one. Raised by KILN_JIT_VERIFY.
class StaleCaptureError : public Error {
 public:
  using Error::Error;
};

// A non-owning reference to "run the user's function on these arguments".
class InvokeRef {
 public:
  template <typename F>
  InvokeRef(F& f)  // NOLINT: implicit on purpose, like function_ref
      : object_(&f),
        call_([](void* o, std::span<const CallArg> a) { return (*static_cast<F*>(o))(a); }) {}
  std::vector<Tensor> operator()(std::span<const CallArg> args) const {
    return call_(object_, args);
  }

 private:
  void* object_;
  std::vector<Tensor> (*call_)(void*, std::span<const CallArg>);
};

struct CompiledStats {
  std::int64_t calls = 0;
  std::int64_t hits = 0;           // calls served by an existing entry
  std::int64_t compiles = 0;       // traces that produced an entry
  std::int64_t eager_calls = 0;    // calls past the recompile limit
  std::int64_t verifications = 0;  // re-traces made for KILN_JIT_VERIFY
  // Calls run by generated kernels and library calls alone: a plan with a fallback step (a
  // node no template renders, or a step that fell back to primitive ops at run time: an
  // attention call the fused kernels refused) or the reference executor does not count.
  std::int64_t kernel_calls = 0;
};

class PlanGraphs;  // cuda_graphs.h

class CompiledFunctionCore {
 public:
  explicit CompiledFunctionCore(CompileOptions options);

  std::vector<Tensor> call(std::span<const CallArg> args, InvokeRef invoke);
  // The entry this call would use, or -1; runs nothing (for benchmarks and tests).
  int lookup(std::span<const CallArg> args) const;

  std::string explain() const;
  std::string graph_dot(int entry = -1) const;  // -1: the newest entry
  std::size_t num_entries() const;
  const graph::Graph& graph(int entry) const;
  const graph::Partition& fusion(int entry) const;
  // The entry's launches (graphs on CUDA tensors), or null.
  const KernelPlan* plan(int entry) const;
  // The entry's CUDA graphs (CompileOptions::cuda_graphs), or null.
  const PlanGraphs* graphs(int entry) const;
  // The entry's forward + backward program (calls that need gradients), or null.
  const AotProgram* aot(int entry) const;
  const GuardSet& guards(int entry) const;
  std::vector<std::string> recompile_reasons() const;
  CompiledStats stats() const;
  const CompileOptions& options() const { return options_; }

 private:
  // A count warm calls bump without the lock (relaxed: no other memory is published through it;
  // `calls` also picks the calls KILN_JIT_VERIFY re-traces).
  struct Counter {
    std::atomic<std::int64_t> n{0};
    Counter() = default;
    Counter(Counter&& o) noexcept : n(o.n.load()) {}
    std::int64_t operator++() { return n.fetch_add(1, std::memory_order_relaxed) + 1; }
    std::int64_t get() const { return n.load(std::memory_order_relaxed); }
  };
  struct Entry {
    GuardSet guards;
    graph::Graph graph;              // optimized: what runs
    std::vector<std::size_t> written;  // graph.inputs each call writes back (written_inputs.h)
    graph::Graph traced;             // as recorded: what a verification re-trace is compared with
    graph::Partition fusion;         // the kernels `graph` becomes
    std::optional<KernelPlan> plan;  // for graphs on CUDA tensors
    // The plan's CUDA graphs, where options or KILN_CUDA_GRAPHS ask for them.
    std::shared_ptr<PlanGraphs> graphs;
    // For calls that need gradients: the compiled forward and backward, or why there is none.
    std::shared_ptr<const AotProgram> aot;
    std::string aot_fallback;
    std::vector<std::vector<int>> arg_symbols;
    Counter hits;
    std::string reason;     // why it was traced
    double compile_ms = 0;  // tracing through compiling its kernels
    // Held by a call of an entry with random draws while their inputs are set and read.
    std::shared_ptr<std::mutex> draws_mutex = std::make_shared<std::mutex>();
  };
  using DimSet = std::set<std::pair<int, int>>;  // (argument, dim)
  struct Trace;
  struct SymbolAssignment;

  // The first entry whose guards pass this call, its hit counted; the caller holds mutex_
  // (shared or exclusive).
  std::shared_ptr<const Entry> find_entry(std::span<const CallArg> args,
                                          std::vector<std::int64_t>& symbol_values);
  // Traces the call into a new entry. Its phases: symbols for the candidate dims, the trace and
  // the probe trace, the trace pipeline, the compiled backward, the fusion plan, the guards;
  // dims a phase shows size-dependent are specialized and the call traced again.
  Entry make_entry(std::span<const CallArg> args, InvokeRef invoke, DimSet dynamic);
  static SymbolAssignment assign_symbols(std::span<const CallArg> args, const DimSet& candidates);
  // The forward and backward programs of entry `e` (or e.aot_fallback); the dims to specialize
  // when the backward does not serve every size the forward does.
  DimSet compile_for_training(Entry& e, std::span<const CallArg> args, std::optional<Trace>& probe,
                              const SymbolAssignment& sym, const DimSet& candidates) const;
  DimSet backward_demotions(const JointGraph& joint, const Entry& e, std::span<const CallArg> args,
                            std::optional<Trace>& probe, const SymbolAssignment& sym,
                            const DimSet& candidates) const;
  GuardSet guards_for(const graph::Graph& g, std::span<const CallArg> args,
                      const std::vector<std::vector<int>>& arg_symbols) const;
  void specialize(const DimSet& dims, DimSet& candidates);
  // KILN_LOG=recompiles: which dims stay static, and why (the op, where one is to blame).
  void log_specialized(const DimSet& dims, const std::string& why) const;
  // Names the KILN_DUMP_DIR files of the entry being made: `<function>.<entry>`.
  std::string dump_prefix() const;
  Trace run_trace(std::span<const CallArg> args, InvokeRef invoke,
                  const std::vector<std::vector<int>>& arg_symbols,
                  const std::vector<std::int64_t>& symbol_sizes) const;
  void verify(const Entry& entry, std::span<const CallArg> args, InvokeRef invoke,
              std::span<const std::int64_t> symbol_values) const;
  std::string arg_name(std::size_t i) const;
  void report(const Entry& e, std::size_t index) const;

  CompileOptions options_;
  mutable std::shared_mutex mutex_;
  std::vector<std::shared_ptr<Entry>> entries_;
  DimSet dynamic_;      // dims made symbolic after size-induced recompiles
  DimSet specialized_;  // dims shown size-dependent: never symbolic again
  // Warm calls read entries_ under a shared lock; a miss (a trace) takes it exclusively.
  struct Stats {
    Counter calls, hits, compiles, eager_calls, verifications, kernel_calls;
  } stats_;
  bool warned_limit_ = false;
  std::string last_reason_;
};

// Asks for dim `dim` of `t` to be traced as a symbolic size from the first compile on.
void mark_dynamic(const Tensor& t, std::int64_t dim);

}  // namespace kiln::jit
