// A traced graph as launches, one typed step per fusion group (plan_step.h), built in phases
// (plan_build.h): a generated kernel, a matmul with its epilogue as one cuBLASLt call, attention
// with its outputs placed, a host view, nodes run one by one as eager CUDA ops (each a library
// call or a generated kernel of its own), or a node no template renders, with the fuser's reason.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "graph/fusion.h"
#include "graph/graph.h"
#include "jit/buffer_assignment.h"
#include "jit/call_args.h"
#include "jit/plan_arena.h"
#include "jit/plan_step.h"

namespace kiln::jit {

class NodeKernels;  // eager_ops.h

class KernelPlan {
 public:
  // Renders every group it can and makes its kernels ready (from memory, the disk cache, or
  // NVRTC).
  KernelPlan(const graph::Graph& graph, const graph::Partition& partition);

  // Runs the graph on this call's arguments; outputs as the graph returns them. No autograd:
  // calls that need gradients take the reference executor.
  std::vector<Tensor> run(const graph::Graph& graph, std::span<const CallArg> args,
                          std::span<const std::int64_t> symbol_values) const;

  // run() in `buffers`, a lease of this plan's arena the caller holds across calls (a CUDA
  // graph's replays write where its capture did).
  std::vector<Tensor> run_in(const PlanArena::Lease& buffers, const graph::Graph& graph,
                             std::span<const CallArg> args,
                             std::span<const std::int64_t> symbol_values) const;

  int kernel_count() const;
  // Steps run by a generated kernel, a cuBLASLt call, or an eager CUDA op that is one (matmul,
  // indexing, scan, movement), against fallback steps: a node no template renders, run by
  // dispatch with the fuser's reason. A call with a fallback step is not a kernel call
  // (CompiledStats::kernel_calls).
  int kernel_steps() const;
  int fallback_steps() const;
  // Whether a step has fallen back to primitive ops at run time (an attention step whose call
  // the fused kernels refused: its shapes or devices at run time), in any call so far. A call
  // of a plan that has is not a kernel call either; str() names the step and the reason.
  bool fell_back_at_run_time() const;
  // What run() records when a step falls back (once per step and reason).
  void note_run_time_fallback(std::size_t step, const std::string& why) const;
  // Intermediate bytes alive at once at the traced sizes, with each released after its last
  // reader (peak) and, for comparison, were none released (total).
  std::int64_t peak_bytes() const { return peak_bytes_; }
  std::int64_t total_bytes() const { return total_bytes_; }
  // One line per step: "kernel k_add_relu (pointwise, 3 nodes)", "eager: matmul (why)", ...,
  // with the arena offsets of what it writes, and the arena's size, at the traced sizes.
  std::string str() const;

  // The buffers of the values the generated kernels write that do not leave a call
  // (buffer_assignment.h), and the arena they live in.
  const BufferAssignment& buffers() const { return *buffers_; }
  // The arena's bytes at the traced sizes, and the most its buffers hold at once there.
  ArenaLayout traced_layout() const { return buffers_->layout(traced_symbols_); }
  // The device address of the arena block the last call ran in (0: none yet, or no buffers):
  // a warm call at the sizes of the one before finds its values where they were.
  std::uintptr_t last_arena_address() const;
  PlanArena& arena() const { return *arena_; }
  // The kernels of the nodes its eager and host-view steps run, each found on its first call.
  NodeKernels& node_kernels() const { return *node_kernels_; }

  // Steps nothing would keep a CUDA graph from capturing as they run now (plan_capture.h:
  // PlanStep::capture_blocker says why not for the others), and whether that is all of them.
  int capturable_steps() const;
  bool capturable() const;

  // The device copy of `host`, the value of graph input `input` (a tensor the trace made or
  // captured on the host): one kept from call to call for a constant of the trace (again only
  // should its storage or version change), a new upload per call otherwise
  // (plan_build::keeps_upload).
  Tensor device_copy(std::size_t input, const Tensor& host) const;

  // The steps in the order they run (plan_step.h).
  const std::vector<PlanStep>& steps() const { return steps_; }

 private:
  std::vector<PlanStep> steps_;
  std::shared_ptr<const BufferAssignment> buffers_;
  std::shared_ptr<PlanArena> arena_;
  std::shared_ptr<NodeKernels> node_kernels_;
  std::vector<std::int64_t> traced_symbols_;
  std::int64_t peak_bytes_ = 0, total_bytes_ = 0;
  struct RunTimeFallbacks;
  std::shared_ptr<RunTimeFallbacks> run_time_fallbacks_;
  struct HostInputs;
  std::shared_ptr<HostInputs> host_inputs_;
};

}  // namespace kiln::jit
