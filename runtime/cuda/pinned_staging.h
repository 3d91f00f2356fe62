// kiln::cuda::PinnedStaging: uploads from any host memory without making the host wait, as
// PyTorch's CachingHostAllocator does. The bytes are copied into a page-locked block, the block's
// copy to the device is queued (cuMemcpyHtoDAsync) and an event recorded after it; the block is
// reused only once that event has completed, so a queued copy never reads bytes overwritten by a
// later upload. A copy from pageable memory instead waits for all queued work (cuMemcpyHtoD).
//
// Blocks are cached by size class (powers of two from 512 B) and never returned to the backend
// until empty_cache().
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

#include "runtime/cuda/backend.h"

namespace kiln::cuda {

struct PinnedStagingStats {
  std::size_t uploads = 0;
  std::size_t host_allocs = 0;  // blocks obtained from the backend (cuMemHostAlloc)
  std::size_t reuses = 0;       // uploads served by a cached block whose copy had completed
  std::size_t in_flight = 0;    // blocks whose copy's event had not completed when last looked at
  std::size_t cached_bytes = 0;
};

class PinnedStaging {
 public:
  static constexpr std::size_t kMinBlock = 512;

  explicit PinnedStaging(Backend& backend);
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  // Copies `bytes` from `src` into a pinned block and queues the block's copy to `dst` on
  // `stream`; returns without waiting for the device. Thread-safe.
  void upload(DevicePtr dst, const void* src, std::size_t bytes, Stream stream = nullptr);

  // Waits for every queued copy and returns every block to the backend.
  void empty_cache();
  PinnedStagingStats stats() const;

  static std::size_t block_size(std::size_t bytes);

 private:
  struct Block {
    void* data = nullptr;
    std::size_t size = 0;
    Event copied = nullptr;  // recorded after the block's last copy
  };
  void collect_completed_locked();

  Backend& backend_;
  mutable std::mutex mutex_;
  std::multimap<std::size_t, Block> free_;  // by size: their copies have completed
  std::vector<Block> in_flight_;
  PinnedStagingStats stats_;
};

// The staging of the process-wide backend (backend()); never destroyed.
PinnedStaging& pinned_staging();

}  // namespace kiln::cuda
