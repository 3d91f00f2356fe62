// Uploads staged through a cache of page-locked blocks (see pinned_staging.h).
#include "runtime/cuda/pinned_staging.h"

#include <bit>
#include <cstring>

#include "runtime/cuda/host_sync.h"
#include "runtime/error.h"

namespace kiln::cuda {

PinnedStaging::PinnedStaging(Backend& backend) : backend_(backend) {}

PinnedStaging::~PinnedStaging() {
  try {
    empty_cache();
  } catch (const Error&) {  // at exit the device may be gone; the blocks go with the process
  }
}

std::size_t PinnedStaging::block_size(std::size_t bytes) {
  return std::bit_ceil(std::max(bytes, kMinBlock));
}

void PinnedStaging::collect_completed_locked() {
  for (std::size_t i = 0; i < in_flight_.size();) {
    if (backend_.event_done(in_flight_[i].copied)) {
      free_.emplace(in_flight_[i].size, in_flight_[i]);
      in_flight_[i] = in_flight_.back();
      in_flight_.pop_back();
    } else {
      ++i;
    }
  }
  stats_.in_flight = in_flight_.size();
}

void PinnedStaging::upload(DevicePtr dst, const void* src, std::size_t bytes, Stream stream) {
  if (bytes == 0) return;
  KILN_CHECK(src != nullptr, "PinnedStaging::upload: {} bytes from a null host pointer", bytes);
  std::lock_guard lock(mutex_);
  collect_completed_locked();
  const std::size_t size = block_size(bytes);
  Block block;
  if (auto it = free_.lower_bound(size); it != free_.end() && it->first <= 2 * size) {
    block = it->second;
    free_.erase(it);
    ++stats_.reuses;
  } else {
    block.data = backend_.host_alloc(size);
    block.size = size;
    try {
      block.copied = backend_.create_event();
    } catch (...) {
      backend_.host_free(block.data);
      throw;
    }
    ++stats_.host_allocs;
    stats_.cached_bytes += size;
  }
  std::memcpy(block.data, src, bytes);
  try {
    backend_.copy_to_device(dst, block.data, bytes, stream);
    backend_.record_event(block.copied, stream);
  } catch (...) {
    // The copy may or may not be queued: keep the block out of reuse until a synchronization.
    backend_.synchronize();
    free_.emplace(block.size, block);
    throw;
  }
  in_flight_.push_back(block);
  stats_.in_flight = in_flight_.size();
  ++stats_.uploads;
}

void PinnedStaging::empty_cache() {
  std::lock_guard lock(mutex_);
  if (!in_flight_.empty()) count_synchronization();
  for (const Block& b : in_flight_) backend_.synchronize_event(b.copied);
  for (const Block& b : in_flight_) free_.emplace(b.size, b);
  in_flight_.clear();
  for (auto& [size, b] : free_) {
    backend_.destroy_event(b.copied);
    backend_.host_free(b.data);
  }
  free_.clear();
  stats_.in_flight = 0;
  stats_.cached_bytes = 0;
}

PinnedStagingStats PinnedStaging::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

PinnedStaging& pinned_staging() {
  static PinnedStaging* staging = new PinnedStaging(backend());
  return *staging;
}

}  // namespace kiln::cuda
