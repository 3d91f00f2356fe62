// racecheck and initcheck for global and local memory (KILN_VGPU_CHECK=race,init; shared memory
// is shared_check.h). Each device allocation carries an AllocShadow: a bit per byte saying
// whether anything initialized it (host copies, memsets, kernel stores) and, under racecheck, a
// record per 4-byte granule of its last writer and last two readers in the current launch.
//
// racecheck on global memory: two accesses to overlapping bytes, at least one a plain store, are
// a hazard (RAW, WAR, WAW) when they come from different blocks of one launch, or from threads of
// different warps of one block with no barrier between them. Not hazards:
//  - atomics (atom, red) and flag accesses (ld/st .volatile, .relaxed, .acquire, .release);
//  - a fence-and-flag protocol: the earlier access's block executed a fence (membar, fence,
//    __threadfence) after it, and the later access's block executed a fence, an atomic or a
//    flag access before it (the "last block reduces the partials" pattern). Fences and flag
//    operations are counted per block, not per thread: a coarse but conservative-enough model.
// Not modelled: global accesses between lanes of one warp (warp-synchronous code orders them
// with shuffles or __syncwarp, which are not tracked per global byte); within a block, only the
// last two readers of a granule are remembered; accesses in the same granule by different blocks
// to disjoint bytes keep only the last writer, so a later conflict with the earlier one may go
// unreported (never a false report); cp.async.bulk/TMA (not implemented).
//
// initcheck: fresh allocations (cuMemAlloc, device malloc) start uninitialized; host-to-device
// and device-to-device copies, memsets and kernel stores and atomics initialize. A kernel load or
// atomic of a byte never initialized is an error; a copy to the host of such bytes is not (an
// empty tensor copied out is legal). Allocations made while init checking is off, and every
// allocation once a launch runs with it off (its stores are not tracked), count as initialized.
// Local memory (stack frames, spills) starts uninitialized in every frame a thread enters.
// Registers are not checked: the interpreter zeroes a frame's registers on entry.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "runtime/cuda/virtual/thread.h"

namespace kiln::cuda::vgpu {

// One access remembered in a granule (20 bytes: the shadow is 15x the bytes it covers).
struct GlobalAccess {
  std::uint32_t block = 0;   // block serial (MemoryMap::reserve_blocks); older launches: none
  std::uint32_t line = 0;    // PTX line of the instruction
  std::uint32_t epoch = 0;   // barriers the thread had passed
  std::uint32_t fences = 0;  // fences its block had executed before the access
  std::uint16_t thread = 0;  // linear thread id in the block
  std::uint8_t mask = 0;     // bytes of the granule accessed
  std::uint8_t kind = 0;     // 1 load, 2 store
};

struct GlobalGranule {
  GlobalAccess writer, reader, other_reader;
};

struct GranuleFree {
  void operator()(GlobalGranule* p) const { std::free(p); }
};

// Check state of one allocation.
struct AllocShadow {
  std::vector<std::uint64_t> init;  // bit per byte; empty: untracked (counts as initialized)
  std::unique_ptr<GlobalGranule[], GranuleFree> race;  // calloc'ed: zero pages until touched
  std::uint64_t granules = 0;
  void mark_init(std::uint64_t offset, std::uint64_t bytes);
  // First uninitialized byte of [offset, offset+bytes), or ~0.
  std::uint64_t first_uninit(std::uint64_t offset, std::uint64_t bytes) const;
};

// Per-launch state of the global checks, owned by run_launch.
struct GlobalCheckState {
  std::uint32_t first_serial = 0;           // serial of the launch's block 0
  std::uint32_t current_serial = 0;         // serial of the running block
  std::vector<std::uint32_t> block_fences;  // per linear block: fences executed (final once run)
};

// Checks and records a global access of `size` bytes at `addr`, inside allocation `a` (base
// `base`, shadow `s`): called by resolve() when LaunchContext::global is set.
void check_global_access(ThreadState& t, const Instr& in, std::uint64_t addr, unsigned size,
                         Access access, std::uint64_t base, AllocShadow* s);
// Checks a local load / records a local store (initcheck).
void check_local_access(ThreadState& t, const Instr& in, std::uint64_t offset, unsigned size,
                        Access access);

}  // namespace kiln::cuda::vgpu
