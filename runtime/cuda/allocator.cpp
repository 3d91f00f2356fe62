// The caching device allocator: size classes, per-stream free lists, OOM retry.
#include "runtime/cuda/allocator.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/cuda/host_sync.h"

namespace kiln::cuda {

std::string AllocatorStats::to_string() const {
  return fmt::format(
      "allocated {} B, reserved {} B, peak allocated {} B, {} allocs ({} cache hits), "
      "{} backend allocs, {} backend frees",
      allocated, reserved, peak_allocated, num_allocs, num_cache_hits, num_backend_allocs,
      num_backend_frees);
}

CachingAllocator::CachingAllocator(Backend& backend, AllocatorOptions options)
    : backend_(backend), options_(options) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(mutex_);
  try {
    free_cached_locked();
  } catch (const Error&) {
    // A destructor must not throw; the backend reclaims its memory at exit.
  }
}

std::size_t CachingAllocator::round_size(std::size_t bytes) {
  if (bytes == 0) return kSmallRound;
  std::size_t unit = bytes <= kSmallLimit ? kSmallRound : kLargeRound;
  KILN_CHECK(bytes <= SIZE_MAX - unit, "CachingAllocator: request of {} bytes is too large", bytes);
  return (bytes + unit - 1) / unit * unit;
}

DevicePtr CachingAllocator::take_cached(std::size_t rounded, Stream stream) {
  // Best fit within [rounded, 2 * rounded]: first this stream's blocks, then the shared pool.
  auto it = stream_free_.lower_bound({stream, rounded});
  if (it != stream_free_.end() && it->first.first == stream && it->first.second <= 2 * rounded) {
    DevicePtr p = it->second;
    live_[p] = Block{it->first.second, stream};
    stream_free_.erase(it);
    return p;
  }
  auto jt = shared_free_.lower_bound(rounded);
  if (jt != shared_free_.end() && jt->first <= 2 * rounded) {
    DevicePtr p = jt->second;
    live_[p] = Block{jt->first, stream};
    shared_free_.erase(jt);
    return p;
  }
  return 0;
}

DevicePtr CachingAllocator::backend_alloc(std::size_t rounded) {
  if (options_.memory_limit != 0 && stats_.reserved + rounded > options_.memory_limit) {
    throw Error(fmt::format("memory limit of {} bytes reached ({} reserved)", options_.memory_limit,
                            stats_.reserved));
  }
  DevicePtr p = backend_.alloc(rounded);
  KILN_CHECK(p != 0, "backend alloc({}) returned a null pointer", rounded);
  stats_.reserved += rounded;
  ++stats_.num_backend_allocs;
  return p;
}

DevicePtr CachingAllocator::allocate(std::size_t bytes, Stream stream) {
  std::size_t rounded = round_size(bytes);
  std::lock_guard lock(mutex_);
  DevicePtr p = take_cached(rounded, stream);
  if (p) {
    ++stats_.num_cache_hits;
  } else {
    try {
      p = backend_alloc(rounded);
    } catch (const Error&) {
      // Cached blocks may be what stands in the way: return them all and try once more.
      ++stats_.num_oom_retries;
      free_cached_locked();
      try {
        p = backend_alloc(rounded);
      } catch (const Error& second) {
        throw OutOfMemoryError(
            fmt::format("CachingAllocator: out of memory allocating {} bytes (rounded to {}) on "
                        "the {} backend after emptying the cache: {} [{}]",
                        bytes, rounded, backend_.kind(), second.what(), stats_.to_string()),
            bytes);
      }
    }
    live_[p] = Block{rounded, stream};
  }
  ++stats_.num_allocs;
  stats_.allocated += live_[p].size;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  return p;
}

void CachingAllocator::deallocate(DevicePtr ptr) {
  if (!ptr) return;
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  KILN_CHECK(it != live_.end(),
             "CachingAllocator::deallocate({:#x}): not a live block of this allocator (double "
             "free, or allocated elsewhere)",
             ptr);
  stats_.allocated -= it->second.size;
  stream_free_.emplace(std::pair{it->second.stream, it->second.size}, ptr);
  live_.erase(it);
}

std::size_t CachingAllocator::block_size(DevicePtr ptr) const {
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  KILN_CHECK(it != live_.end(), "CachingAllocator::block_size({:#x}): not a live block", ptr);
  return it->second.size;
}

void CachingAllocator::release_stream(Stream stream) {
  count_synchronization();
  backend_.synchronize_stream(stream);
  std::lock_guard lock(mutex_);
  auto it = stream_free_.lower_bound({stream, 0});
  while (it != stream_free_.end() && it->first.first == stream) {
    shared_free_.emplace(it->first.second, it->second);
    it = stream_free_.erase(it);
  }
}

void CachingAllocator::free_cached_locked() {
  if (stream_free_.empty() && shared_free_.empty()) return;
  count_synchronization();
  backend_.synchronize();  // a cached block may still be in use by queued work
  std::vector<std::pair<DevicePtr, std::size_t>> blocks;
  for (auto& [key, p] : stream_free_) blocks.emplace_back(p, key.second);
  for (auto& [size, p] : shared_free_) blocks.emplace_back(p, size);
  stream_free_.clear();
  shared_free_.clear();
  for (auto [p, size] : blocks) {
    stats_.reserved -= size;
    ++stats_.num_backend_frees;
    backend_.free(p);
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  free_cached_locked();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_allocated = stats_.allocated;
}

}  // namespace kiln::cuda
