// racecheck and initcheck for shared memory (KILN_VGPU_CHECK=race,init): compute-sanitizer's
// two shared-memory tools, on the interpreter. Each shared byte remembers its last writer and
// its last two readers: the thread, the barrier epoch it had seen and the warp-synchronization
// epoch it had seen, and the instruction. Two accesses by different threads, one a write, are a
// hazard unless a barrier (bar.sync) the two both took part in lies between them, or, within a
// warp, a warp-synchronizing instruction (shfl.sync, vote.sync, bar.warp.sync, ...) both
// joined: since Volta a warp's threads are not in lockstep. Atomics are never hazards.
// initcheck reports a read of a byte no thread of the block has written.
//
// Global and local memory have their own checks (global_check.h); KILN_VGPU_SCHEDULE=random
// (launch.h) interleaves threads so an unordered pair may come up in either order.
// Not modelled: fences with flag protocols on shared memory (reported as hazards);
// mbarrier/cp.async.bulk/TMA; registers read before written (frames start zeroed).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/cuda/virtual/thread.h"

namespace kiln::cuda::vgpu {

// Which checks KILN_VGPU_CHECK asks for: a comma list of race, init, all, none.
struct Checks {
  bool race = false;
  bool init = false;
  bool any() const { return race || init; }
};
Checks checks_from_env();

struct SharedAccess {
  std::uint32_t thread = kNone;  // linear thread id in the block
  std::uint32_t barrier_epoch = 0, warp_epoch = 0;
  const Instr* instr = nullptr;
  const Function* fn = nullptr;
  static constexpr std::uint32_t kNone = 0xffffffffu;
};

// The shadow of one block's shared memory.
struct SharedShadow {
  std::vector<SharedAccess> writer, reader, other_reader;
  std::vector<std::uint8_t> written;
  std::vector<std::uint32_t> warp_epoch;  // per warp: warp-synchronizations so far
  std::uint32_t barrier_epoch = 0;
  void reset(std::uint64_t bytes, std::uint32_t warps);
};

// Checks and records an access of `size` bytes at `offset` into the block's shared memory.
void check_shared_access(ThreadState& t, const Instr& in, std::uint64_t offset, unsigned size,
                         Access access);

}  // namespace kiln::cuda::vgpu
