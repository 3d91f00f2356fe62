// The virtual GPU's profiler: what each launch did to memory, measured while it runs rather than
// guessed from tensor sizes. Per launch: thread-instructions, global bytes loaded and stored,
// warp-level requests and the 32-byte sectors they touched (coalescing), shared-memory requests
// and bank conflicts, atomics. On with KILN_PROFILE=1 (a per-kernel table at exit) or
// set_profiling(true) (tests and benchmarks read profiles()).
//
// A warp-level request is a warp's n-th global (or shared) access: threads of a warp run one
// after another here, and a converged warp's threads issue the same sequence of accesses, so
// their n-th accesses are what the hardware coalesces into one request. Divergent code is
// approximated the same way. A request is charged each distinct sector once: exactly when its
// lanes' bytes form one run (coalesced, broadcast and wrapped accesses), and otherwise by
// remembering its last four sectors.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/cuda/backend.h"

namespace kiln::cuda::vgpu {

// The DRAM bandwidth of the H100 SXM the profiler models (HBM3: 2619 MHz x 5120 bits x 2 / 8).
inline constexpr double kModeledDramBytesPerSecond = 3.35e12;
// Its dense tensor-core peaks (NVIDIA H100 Tensor Core GPU Architecture whitepaper, table
// "NVIDIA H100 SXM5": FP16 / BF16 with FP32 accumulate 989.4 TFLOPS, TF32 494.7 TFLOPS; 132 SMs
// x 1830 MHz x 4096 and 2048 flops per SM per clock). mma.sync reaches less than these on an
// H100 (wgmma is what feeds them fully): the model is a lower bound on its time.
inline constexpr double kModeledTensorF16FlopsPerSecond = 989.4e12;
inline constexpr double kModeledTensorTf32FlopsPerSecond = 494.7e12;

struct KernelProfile {
  std::string kernel;
  Dim3 grid, block;
  std::uint64_t thread_instructions = 0;
  // The same instructions weighted by what each costs the modeled GPU's issue (issue_cost.h),
  // in quarter slots: an FP32 FMA is one slot, a MUFU op 8, a 32-bit integer remainder ~54.
  std::uint64_t issue_quarters = 0;
  std::uint64_t load_bytes = 0, store_bytes = 0;        // global memory, as the threads asked
  std::uint64_t load_requests = 0, store_requests = 0;  // warp-level global requests
  std::uint64_t load_sectors = 0, store_sectors = 0;    // 32-byte sectors those requests touched
  // Distinct sectors loaded and stored: the DRAM traffic of a cache that holds the launch's
  // working set (an H100's L2 is 50 MB), where the sectors above are what L1 serves.
  std::uint64_t dram_load_sectors = 0, dram_store_sectors = 0;
  std::uint64_t shared_requests = 0;
  // Shared-memory wavefronts beyond one per request. A request takes as many as its busiest bank
  // has distinct words, so 32 lanes' 8- or 16-byte accesses take 2 or 4.
  std::uint64_t bank_conflicts = 0;
  std::uint64_t atomics = 0;  // thread-level atomic operations (global and shared)
  // Tensor-core work: warp-level mma.sync instructions, and their flops (2 M N K each) by input
  // type, f16 / bf16 and tf32 (the two run at different peaks).
  std::uint64_t mma_instructions = 0;
  std::uint64_t mma_flops_f16 = 0, mma_flops_tf32 = 0;
  double interpret_ms = 0;     // host time the interpreter spent
  std::uint64_t launches = 1;  // more than one once a long run's records are merged

  std::uint64_t dram_bytes() const { return 32 * (dram_load_sectors + dram_store_sectors); }
  double issue_slots() const { return static_cast<double>(issue_quarters) / 4.0; }
  // A roofline estimate for an H100 SXM: the longest of DRAM traffic (kModeledDramBytesPerSecond),
  // instruction issue (the weighted instructions over 132 SMs x 128 slots per cycle at 1.98 GHz)
  // and tensor-core flops at their peaks, plus 3 us launch latency. Not measured.
  double modeled_h100_us() const;
  // Its terms, in microseconds, and the one the modeled time comes from.
  double memory_us() const;
  double issue_us() const;
  double tensor_us() const;
  enum class Bound { memory, issue, tensor };
  Bound bound() const;
  void add(const KernelProfile& other);  // sums every counter (another launch of the kernel)
};

const char* bound_name(KernelProfile::Bound bound);

void set_profiling(bool on);
bool profiling();  // set_profiling, else KILN_PROFILE=1
const std::vector<KernelProfile>& profiles();
void clear_profiles();
// One row per kernel name (launches summed), in order of first launch.
std::string profile_table(const std::vector<KernelProfile>& profiles);

// ---- used by the interpreter -----------------------------------------------------------------

void record_profile(KernelProfile profile);

struct ThreadState;
enum class Access : std::uint8_t;  // thread.h

// A lane that takes part in a warp's shared-memory request without an access of its own (the
// lanes of ldmatrix .x1 / .x2 that give no row address): its request count stays in step.
void profile_shared_skip(ThreadState& t);

// One launch's in-flight counters and its per-warp request records (reset per block).
//
// Most warps' lanes access neighbouring bytes in lane order, so a request keeps the run of bytes
// its lanes have covered so far: a lane that extends the run, or falls inside it, costs a compare
// and an add. Only a lane that breaks the run has the run's sectors counted (global) or its words
// listed (shared); the rest is counted once per block, in end_block.
class LaunchProfiler {
 public:
  LaunchProfiler(std::uint32_t block_threads);
  // The interpreter's hooks (thread.h): the common case, a lane that extends its request's run,
  // is handled in them; the rest calls global_request / shared_request.
  friend void profile_global_access(ThreadState& t, std::uint64_t addr, unsigned size,
                                    Access access);
  friend void profile_shared_access(ThreadState& t, std::uint64_t offset, unsigned size,
                                    Access access);
  friend void profile_shared_skip(ThreadState& t);

  // One warp-level mma of `flops` (2 M N K), tf32 inputs or 16-bit ones.
  void count_mma(std::uint64_t flops, bool tf32) {
    ++p_.mma_instructions;
    (tf32 ? p_.mma_flops_tf32 : p_.mma_flops_f16) += flops;
  }
  void end_block();
  KernelProfile& result() { return p_; }

 private:
  struct GlobalRequest {
    std::uint64_t begin, end;  // the run of bytes the lanes so far have covered
    bool store;                // the run's kind: a lane of the other kind starts a new run
    std::uint8_t seen = 0, next = 0;
    std::uint64_t recent[4] = {};  // sectors counted, the last four (runs arrive in order)
    std::uint64_t last = ~0ull;    // the newest of them
  };
  struct SharedRequest {
    std::uint32_t begin, end;           // the run of 4-byte words the lanes so far have covered
    std::uint32_t listed = kNotListed;  // once a lane breaks the run: its index in lists_
  };
  static constexpr std::uint32_t kNotListed = ~0u;
  // A broken run's words, as they came (deduplicated by end_block): up to 32 lanes' 16 bytes.
  struct WordList {
    static constexpr unsigned kCapacity = 128;
    WordList() {}  // words stay unset
    unsigned count = 0;
    std::uint32_t words[kCapacity];
  };
  struct WarpRecords {
    std::vector<GlobalRequest> global;
    std::vector<SharedRequest> shared;
  };
  // Sectors seen in this launch, a bitmap per MiB of address space.
  class SectorSet {
   public:
    bool insert(std::uint64_t sector);  // true when new
    // Inserts sectors [first, last]; returns how many were new.
    std::uint64_t insert_range(std::uint64_t first, std::uint64_t last);

   private:
    static constexpr int kPageShift = 15;  // 2^15 sectors = 1 MiB
    std::vector<std::uint64_t>& page(std::uint64_t index);
    std::unordered_map<std::uint64_t, std::vector<std::uint64_t>> pages_;
    std::uint64_t last_page_ = ~0ull;
    std::vector<std::uint64_t>* last_ = nullptr;
  };
  // The rest of an access: the first lane opens the request; a lane that breaks the run has
  // the run counted (global: its sectors and bytes) or listed (shared).
  void global_request(std::vector<GlobalRequest>& requests, std::uint32_t seq, std::uint64_t addr,
                      unsigned size, bool store);
  void shared_request(std::vector<SharedRequest>& requests, std::uint32_t seq, std::uint32_t begin,
                      std::uint32_t end);
  void count_sectors(GlobalRequest& r);  // of r's run [begin, end)
  static void list_words(WordList& list, std::uint32_t begin, std::uint32_t end);

  SectorSet loaded_, stored_;
  std::vector<WarpRecords> warps_;
  std::vector<WordList> lists_;                         // this block's broken shared runs
  std::vector<std::uint32_t> global_seq_, shared_seq_;  // per thread: its accesses so far
  KernelProfile p_;
};

}  // namespace kiln::cuda::vgpu
