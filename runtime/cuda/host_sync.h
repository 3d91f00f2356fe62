// Counters of what makes the host wait for a CUDA device: copies to the host (each waits for the
// work queued before it), explicit synchronizations (stream, event, device) and uploads from
// pageable memory (the backends count those). kiln's callers of
// those backend calls count here (tensor reads and device-check flags in runtime/, the caching
// allocator, launch timing), so a test can assert that a warm training step makes none.
#pragma once

#include <atomic>
#include <cstdint>

namespace kiln::cuda {

struct HostSyncStats {
  std::atomic<std::int64_t> device_to_host_copies{0};
  std::atomic<std::int64_t> synchronizations{0};
  // Copies to the device from pageable host memory: each waits for all queued work (as
  // cuMemcpyHtoD does) and is counted in `synchronizations` too. Uploads staged through
  // pinned_staging.h are not.
  std::atomic<std::int64_t> pageable_uploads{0};
};

// The process-wide counters.
HostSyncStats& host_sync_stats();

inline void count_device_to_host_copy() {
  host_sync_stats().device_to_host_copies.fetch_add(1, std::memory_order_relaxed);
}
inline void count_synchronization() {
  host_sync_stats().synchronizations.fetch_add(1, std::memory_order_relaxed);
}

inline void count_pageable_upload() {
  host_sync_stats().pageable_uploads.fetch_add(1, std::memory_order_relaxed);
  count_synchronization();
}

}  // namespace kiln::cuda
