// Runs one kernel launch on the host: every block in turn, every thread of a block until it
// exits or parks at a collective, then releases barriers and warp collectives whose
// participants have all arrived, and reports a deadlock (who waits where) when none can.
// KILN_VGPU_SCHEDULE=random:SEED shuffles the block order and interleaves the threads of a
// block in seeded random slices between collectives, so order-dependent bugs show.
#pragma once

#include <cstdint>

#include "runtime/cuda/backend.h"
#include "runtime/cuda/virtual/memory.h"
#include "runtime/cuda/virtual/program.h"

namespace kiln::cuda::vgpu {

struct LaunchRequest {
  const Program* program = nullptr;
  const Function* kernel = nullptr;
  MemoryMap* memory = nullptr;
  Dim3 grid, block;
  unsigned dynamic_shared = 0;
  void** params = nullptr;
  int sm_count = 132;
};

struct LaunchStats {
  std::uint64_t thread_instructions = 0;
  std::uint64_t issue_quarters = 0;  // weighted by issue cost (issue_cost.h)
};

LaunchStats run_launch(const LaunchRequest& request);

// KILN_VGPU_SCHEDULE: in_order (default: thread after thread, deterministic and fastest) or
// random:SEED.
struct Schedule {
  bool random = false;
  std::uint64_t seed = 0;
};
Schedule schedule_from_env();

}  // namespace kiln::cuda::vgpu
