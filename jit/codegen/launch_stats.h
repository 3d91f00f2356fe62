// Counters of generated-kernel work in this process: launches, compiles, host <-> device
// copies, and the global bytes each launch's plan reads and writes (every read of a tensor
// counted at its own size, a reduction's inputs once per pass over the row). Benchmarks and tests
// read them; the virtual GPU's profiler measures what the kernels actually touch.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

namespace kiln::jit::codegen {

struct LaunchStats {
  std::atomic<std::int64_t> launches{0};
  std::atomic<std::int64_t> bytes_read{0};
  std::atomic<std::int64_t> bytes_written{0};
  std::atomic<std::int64_t> compiles{0};    // NVRTC compiles (kernel cache misses)
  std::atomic<std::int64_t> cache_hits{0};  // lookups served by the in-process cache
  std::atomic<std::int64_t> compile_us{0};  // total NVRTC time
  // Tensor copies between the host and a CUDA device (Tensor::to, copy_), each way: an op or a
  // compiled call on CUDA tensors makes none.
  std::atomic<std::int64_t> copies_to_host{0};
  std::atomic<std::int64_t> copies_to_device{0};
  // With `timing` set (benchmarks): host time inside the backend's launch calls. On the virtual
  // GPU that includes running the kernel; on a real one it is the enqueue.
  std::atomic<bool> timing{false};
  std::atomic<std::int64_t> launch_ns{0};
  // Row-reduction launches per variant (reduction_schedule.h: ReductionVariant::index()): which
  // forms and layouts a workload's schedules took.
  std::array<std::atomic<std::int64_t>, 8> reduction_variants{};
  // Lookups of kernels by name (kernel_by_name: a string key under a process-wide lock), which a
  // warm attention launch makes none of.
  std::atomic<std::int64_t> named_lookups{0};
  // Ops a kernel plan ran through dispatch, each going through the op table and a backend's
  // lookup of the op's plan: fallback steps, library calls and attention a per-call rule
  // refused, and every eager op while a trace intercepts. Eager and host-view steps hold their
  // kernels (jit/eager_ops.h) and make none.
  std::atomic<std::int64_t> plan_dispatches{0};
  // CUDA graphs (jit/cuda_graphs.h): replays, each one launch (the kernels a replay runs are
  // not counted in `launches`); captures; arguments copied into a graph's static buffers; and
  // outputs of a replay copied out because something held them when the next replay came.
  std::atomic<std::int64_t> graph_launches{0};
  std::atomic<std::int64_t> graph_captures{0};
  std::atomic<std::int64_t> graph_input_copies{0};
  std::atomic<std::int64_t> graph_outputs_handed_over{0};
};

LaunchStats& launch_stats();
// With `timing` set: this thread's share of launch_ns (benchmarks of several calling threads).
std::int64_t& thread_launch_ns();

}  // namespace kiln::jit::codegen
