// CUDA Graph replay of a warm plan (CompileOptions::cuda_graphs, KILN_CUDA_GRAPHS=1: what
// torch.compile calls "reduce-overhead"). At each set of symbol values the first call runs the
// plan as it is (it finds its kernels), the second captures it on kiln's stream into a graph
// with a memory pool of its own, and later calls replay it with one launch.
//  - Inputs the function declared or captured (parameters, buffers, a KV cache) keep their
//    addresses, which each replay checks (a moved one records again). Arguments are copied into
//    the graph's static buffers, each copy counted (LaunchStats::graph_input_copies).
//  - Outputs live in the graph's memory. A replay first hands each output of the replay before
//    that is still held to its holders (its bytes copied to memory of its own, the tensors'
//    storage moved there), so a tensor a later replay overwrote is never read; an output
//    nobody kept costs nothing.
//  - Each new set of sizes records again, up to a limit; past it, or where a capture fails, the
//    plan runs without a graph and explain() says why.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "jit/call_args.h"
#include "jit/kernel_plan.h"
#include "jit/plan_outputs.h"

namespace kiln::jit {

// KILN_CUDA_GRAPHS=1 turns graphs on for every compiled function (read once per process).
bool cuda_graphs_from_env();

class PlanGraphs {
 public:
  // `limit`: the sets of sizes recorded at most. `refusal`: why no call of the entry may be
  // captured (its random draws read host counters, an argument it writes in place), or empty.
  PlanGraphs(int limit, std::string refusal);
  ~PlanGraphs();
  PlanGraphs(const PlanGraphs&) = delete;
  PlanGraphs& operator=(const PlanGraphs&) = delete;

  // The plan's outputs for this call: by a replay, a capture, or the plan itself. `on_output`
  // and `given_up` as run_reporting_outputs takes them (plan_outputs.h); a replay reports every
  // output once it is queued.
  std::vector<Tensor> run(const KernelPlan& plan, const graph::Graph& g,
                          std::span<const CallArg> args, std::span<const std::int64_t> symbols,
                          const OutputReady& on_output = {}, std::span<Tensor> given_up = {});

  // A backward's graphs read the values its forward's graph saved where that graph wrote them
  // (as cudagraph trees do), instead of copying them in: an argument in `source`'s memory is
  // read in place, and a replay checks it is still at the address the capture saw.
  void read_in_place_from(const PlanGraphs* source) { source_ = source; }

  // Graphs recorded, replays made, outputs handed over, and why calls ran without a graph.
  std::string str() const;
  int recorded() const;

 private:
  // The storage of this object's graph memory that starts at `data`, or null.
  std::shared_ptr<Storage> memory_at(const void* data) const;
  struct Recorded;
  // Why this call cannot be captured or replayed, or empty.
  std::string refusal_of(const KernelPlan& plan, const graph::Graph& g,
                         std::span<const CallArg> args) const;
  void capture(Recorded& r, const KernelPlan& plan, const graph::Graph& g,
               std::span<const CallArg> args, std::span<const std::int64_t> symbols);
  std::vector<Tensor> replay(Recorded& r, std::span<const CallArg> args, bool copy_args);
  void note(std::string why);

  const PlanGraphs* source_ = nullptr;
  const int limit_;
  const std::string refusal_;
  mutable std::mutex mutex_;  // one call at a time: a replay owns the static buffers
  std::map<std::vector<std::int64_t>, std::unique_ptr<Recorded>> by_sizes_;
  std::vector<std::string> notes_;  // why calls ran without a graph, each once
  std::int64_t replays_ = 0, handed_over_ = 0, rerecords_ = 0;
};

}  // namespace kiln::jit
