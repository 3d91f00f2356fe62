// The virtual GPU's profiler: what each launch did to memory, measured while it runs rather than
// guessed from tensor sizes. Per launch: thread-instructions, global bytes loaded and stored,
// warp-level requests and the 32-byte sectors they touched (coalescing), shared-memory requests
// and bank conflicts, atomics. On with KILN_PROFILE=1 (a per-kernel table at exit) or
// set_profiling(true) (tests and benchmarks read profiles()).
//
// A warp-level request is a warp's n-th global (or shared) access: threads of a warp run one
// after another here, and a converged warp's threads issue the same sequence of accesses, so
// their n-th accesses are what the hardware coalesces into one request. Divergent code is
// approximated the same way.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/cuda/backend.h"

namespace kiln::cuda::vgpu {

struct KernelProfile {
  std::string kernel;
  Dim3 grid, block;
  std::uint64_t thread_instructions = 0;
  std::uint64_t load_bytes = 0, store_bytes = 0;        // global memory, as the threads asked
  std::uint64_t load_requests = 0, store_requests = 0;  // warp-level global requests
  std::uint64_t load_sectors = 0, store_sectors = 0;    // 32-byte sectors those requests touched
  // Distinct sectors loaded and stored: the DRAM traffic of a cache that holds the launch's
  // working set (an H100's L2 is 50 MB), where the sectors above are what L1 serves.
  std::uint64_t dram_load_sectors = 0, dram_store_sectors = 0;
  std::uint64_t shared_requests = 0;
  std::uint64_t bank_conflicts = 0;  // extra shared-memory wavefronts beyond one per request
  std::uint64_t atomics = 0;         // thread-level atomic operations (global and shared)
  double interpret_ms = 0;           // host time the interpreter spent
  std::uint64_t launches = 1;        // more than one once a long run's records are merged

  std::uint64_t dram_bytes() const { return 32 * (dram_load_sectors + dram_store_sectors); }
  // A roofline estimate for an H100 SXM (3.35 TB/s; 132 SMs x 4 schedulers issuing one warp
  // instruction per cycle at 1.98 GHz; 3 us launch latency). Modeled, not measured.
  double modeled_h100_us() const;
  void add(const KernelProfile& other);  // sums every counter (another launch of the kernel)
};

void set_profiling(bool on);
bool profiling();  // set_profiling, else KILN_PROFILE=1
const std::vector<KernelProfile>& profiles();
void clear_profiles();
// One row per kernel name (launches summed), in order of first launch.
std::string profile_table(const std::vector<KernelProfile>& profiles);

// ---- used by the interpreter -----------------------------------------------------------------

struct ThreadState;
void record_profile(KernelProfile profile);

// One launch's in-flight counters and its per-warp request records (reset per block).
class LaunchProfiler {
 public:
  LaunchProfiler(std::uint32_t block_threads);
  void access(ThreadState& t, bool shared, std::uint64_t addr, unsigned size, bool store,
              bool atomic);
  void end_block();
  KernelProfile& result() { return p_; }

 private:
  struct GlobalRequest {
    std::uint64_t recent[4];  // sectors seen, the last four (a warp's sectors arrive in order)
    std::uint8_t seen = 0, next = 0;
    std::uint64_t last = ~0ull;  // the newest of them: neighbouring lanes mostly share it
  };
  struct SharedRequest {
    // The 4-byte words the warp's threads touched, as they came (deduplicated by end_block: a
    // search per access cost more than the rest of the profiler). The first 64 are kept.
    std::uint32_t words[64];
    std::uint8_t count = 0;
  };
  struct WarpRecords {
    std::vector<GlobalRequest> global;
    std::vector<SharedRequest> shared;
  };
  // Sectors seen in this launch, a bitmap per MiB of address space.
  class SectorSet {
   public:
    bool insert(std::uint64_t sector);  // true when new
   private:
    std::unordered_map<std::uint64_t, std::vector<std::uint64_t>> pages_;
    std::uint64_t last_page_ = ~0ull;
    std::vector<std::uint64_t>* last_ = nullptr;
  };
  SectorSet loaded_, stored_;
  std::vector<WarpRecords> warps_;
  std::vector<std::uint32_t> global_seq_, shared_seq_;  // per thread: its accesses so far
  KernelProfile p_;
};

}  // namespace kiln::cuda::vgpu
