// Execution state of one virtual thread, its block and its launch, plus the inline register and
// memory accessors every instruction handler uses. Kept in one header so the hot paths inline.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/cuda/backend.h"
#include "runtime/cuda/virtual/memory.h"
#include "runtime/cuda/virtual/program.h"

namespace kiln::cuda::vgpu {

enum class Status : std::uint8_t { running, exited, barrier, warp_wait };

class LaunchProfiler;     // profiler.h
struct AllocShadow;       // global_check.h
struct GlobalCheckState;  // global_check.h

struct LaunchContext {
  const Program* program = nullptr;
  const Function* kernel = nullptr;
  MemoryMap* memory = nullptr;
  Dim3 grid, block;
  const std::uint8_t* params = nullptr;  // kernel parameter buffer (PTX ABI layout)
  std::uint64_t param_bytes = 0;
  std::uint64_t dynamic_shared = 0;
  std::uint64_t clock = 0;  // advances with executed instructions (for %clock)
  const std::uint8_t* const_bank = nullptr;
  std::uint64_t const_bytes = 0;
  bool check_race = false, check_init = false;  // KILN_VGPU_CHECK (shared_check.h)
  LaunchProfiler* profiler = nullptr;           // KILN_PROFILE (profiler.h)
  GlobalCheckState* global = nullptr;           // set under either check (global_check.h)
  // Recently hit global allocations [lo, hi): the launch runs on one host thread and the
  // allocation map only changes through device malloc/free, which clear this.
  static constexpr int kHitEntries = 4;
  std::uint64_t hit_lo[kHitEntries] = {1, 1, 1, 1};
  std::uint64_t hit_hi[kHitEntries] = {0, 0, 0, 0};
  AllocShadow* hit_shadow[kHitEntries] = {};
  unsigned hit_next = 0;
  void clear_hits() {
    for (int i = 0; i < kHitEntries; ++i) hit_lo[i] = 1, hit_hi[i] = 0;
  }
};

struct SharedShadow;  // shared_check.h

struct BlockContext {
  Dim3 ctaid;
  SharedShadow* shadow = nullptr;  // set under KILN_VGPU_CHECK=race or init
  std::uint32_t linear = 0;        // linear block index in the grid
  // Fences, and fences + global atomics + flag accesses, executed so far (global racecheck).
  std::uint32_t fences = 0, sync_ops = 0;
  std::uint32_t bar_arrived[16] = {};  // bar.arrive counts not yet matched by a release
  std::vector<std::uint8_t> shared;
  std::uint64_t shared_bytes = 0;  // static + dynamic; accesses past it fault
};

struct Frame {
  const Function* fn = nullptr;
  std::uint32_t return_pc = 0;
  std::uint32_t reg_base = 0;
  std::uint64_t local_base = 0;
  std::uint64_t param_base = 0;
  std::uint64_t saved_local_top = 0;
  std::uint64_t saved_param_top = 0;
  const CallSite* site = nullptr;
};

enum class Access : std::uint8_t { load, store, atomic };

struct ThreadState {
  std::uint64_t* r = nullptr;  // current frame's registers
  const Instr* code = nullptr;
  std::uint32_t pc = 0;
  Status status = Status::running;
  bool carry = false;  // condition code of add.cc / addc
  std::uint64_t icount = 0;
  std::uint64_t issue_quarters = 0;  // the same instructions weighted by Instr::cost
  std::uint64_t clock_reads = 0;    // advances %clock between stops (see mov_clock)
  std::uint64_t back_branches = 0;  // loop iterations since the thread last parked (watchdog)

  // Collective wait: the instruction and what it named.
  const Instr* wait = nullptr;
  std::uint32_t wait_mask = 0;
  std::uint32_t bar_id = 0, bar_count = 0;
  bool bar_pred = false;

  std::vector<std::uint64_t> regs;
  std::vector<Frame> frames;
  std::vector<std::uint8_t> local;       // local-space stack (addresses are offsets into it)
  std::vector<std::uint8_t> local_init;  // initcheck: 1 per local byte written in its frame
  std::uint64_t local_top = 0;
  std::vector<std::uint8_t> params;  // param-space call stack, at kParamStackBase
  std::uint64_t param_top = 0;
  std::uint64_t fixed[kNumFixedSlots] = {};

  BlockContext* block = nullptr;
  LaunchContext* launch = nullptr;
  std::uint32_t tid[3] = {0, 0, 0};
  std::uint32_t linear = 0, lane = 0, warp = 0;
  // The barrier and warp-synchronization epochs this thread has taken part in (racecheck).
  std::uint32_t barrier_seen = 0, warp_seen = 0;
};

// ---- registers -------------------------------------------------------------------------------

template <class T>
inline T get(const ThreadState& t, std::uint32_t slot) {
  std::uint64_t v = t.r[slot];
  if constexpr (std::is_same_v<T, float>) {
    return std::bit_cast<float>(static_cast<std::uint32_t>(v));
  } else if constexpr (std::is_same_v<T, double>) {
    return std::bit_cast<double>(v);
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else {
    return static_cast<T>(v);
  }
}

template <class T>
inline void put(ThreadState& t, std::uint32_t slot, T v) {
  if constexpr (std::is_same_v<T, float>) {
    t.r[slot] = std::bit_cast<std::uint32_t>(v);
  } else if constexpr (std::is_same_v<T, double>) {
    t.r[slot] = std::bit_cast<std::uint64_t>(v);
  } else if constexpr (std::is_same_v<T, bool>) {
    t.r[slot] = v ? 1 : 0;
  } else {
    t.r[slot] = static_cast<std::make_unsigned_t<T>>(v);
  }
}

// Source predicate operand `i` of `in`, honouring `!p`.
inline bool get_pred(const ThreadState& t, const Instr& in, int i) {
  return (t.r[in.s[i]] != 0) != ((in.flags & (kFlagNegA << i)) != 0);
}

// ---- faults ----------------------------------------------------------------------------------

// "in kernel 'k' block (1,0,0) thread (37,0,0) at PTX line 12 (ld.global.f32 ...)"
std::string where(const ThreadState& t, const Instr* in);
[[noreturn]] void fault(const ThreadState& t, const Instr& in, const std::string& what);
[[noreturn]] void access_fault(ThreadState& t, const Instr& in, Space space, std::uint64_t addr,
                               unsigned size, Access access);

// ---- memory ----------------------------------------------------------------------------------

std::uint8_t* resolve_slow(ThreadState& t, const Instr& in, Space space, std::uint64_t addr,
                           unsigned size, Access access);
void check_shared_access(ThreadState& t, const Instr& in, std::uint64_t offset, unsigned size,
                         Access access);  // shared_check.h
void check_global_access(ThreadState& t, const Instr& in, std::uint64_t addr, unsigned size,
                         Access access, std::uint64_t base, AllocShadow* s);  // global_check.h
void check_local_access(ThreadState& t, const Instr& in, std::uint64_t offset, unsigned size,
                        Access access);  // global_check.h

// Count a global or shared access that resolved (profiler.h). Out of line, so that the plain
// path keeps its registers; param and local accesses never reach the profiler.
void profile_global_access(ThreadState& t, std::uint64_t addr, unsigned size, Access access);
void profile_shared_access(ThreadState& t, std::uint64_t offset, unsigned size, Access access);

// Host pointer for `size` bytes at `addr` in `space`, after checking bounds, liveness and
// alignment (size is a power of two: the element or whole-vector size).
inline std::uint8_t* resolve(ThreadState& t, const Instr& in, Space space, std::uint64_t addr,
                             unsigned size, Access access) {
  if ((space == Space::global || (space == Space::generic && addr < kSharedWindow)) &&
      (addr & (size - 1)) == 0) {
    const LaunchContext& l = *t.launch;
    for (int i = 0; i < LaunchContext::kHitEntries; ++i)
      if (addr >= l.hit_lo[i] && addr + size <= l.hit_hi[i]) {
        if (l.global) check_global_access(t, in, addr, size, access, l.hit_lo[i], l.hit_shadow[i]);
        if (l.profiler) [[unlikely]]
          profile_global_access(t, addr, size, access);
        return reinterpret_cast<std::uint8_t*>(addr);
      }
  }
  if (space == Space::shared && addr + size <= t.block->shared_bytes && (addr & (size - 1)) == 0) {
    if (t.block->shadow) check_shared_access(t, in, addr, size, access);
    if (t.launch->profiler) [[unlikely]]
      profile_shared_access(t, addr, size, access);
    return t.block->shared.data() + addr;
  }
  if (space == Space::local && addr + size <= t.local_top && (addr & (size - 1)) == 0) {
    if (t.launch->check_init) check_local_access(t, in, addr, size, access);
    return t.local.data() + addr;
  }
  if (space == Space::param && access == Access::load && addr + size <= t.launch->param_bytes &&
      (addr & (size - 1)) == 0)
    return const_cast<std::uint8_t*>(t.launch->params) + addr;
  return resolve_slow(t, in, space, addr, size, access);
}

template <class T>
inline T load_as(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <class T>
inline void store_as(std::uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

// ---- frames ----------------------------------------------------------------------------------

void enter_frame(ThreadState& t, const Function& fn, std::uint32_t return_pc, const CallSite* site,
                 std::uint64_t param_base);

}  // namespace kiln::cuda::vgpu
