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

// A block of `pool` (best fit, as take_cached), or a new one for it from the backend; the capture
// in progress forbids neither, since relaxed mode allows the allocation.
DevicePtr CachingAllocator::take_from_pool(std::size_t rounded, Stream stream, int pool) {
  auto& free = pools_.at(pool).free;
  auto it = free.lower_bound(rounded);
  if (it != free.end() && it->first <= 2 * rounded) {
    DevicePtr p = it->second;
    live_[p] = Block{it->first, stream, pool};
    free.erase(it);
    ++stats_.num_cache_hits;
    return p;
  }
  DevicePtr p = 0;
  try {
    CaptureModeGuard relaxed(backend_, CaptureMode::relaxed);
    p = backend_alloc(rounded);
  } catch (const Error& e) {
    // Emptying the cache would synchronize, which a capture forbids.
    throw OutOfMemoryError(
        fmt::format("CachingAllocator: out of memory allocating {} bytes for a CUDA graph's pool "
                    "on the {} backend: {} [{}]",
                    rounded, backend_.kind(), e.what(), stats_.to_string()),
        rounded);
  }
  stats_.graph_pool_bytes += rounded;
  live_[p] = Block{rounded, stream, pool};
  return p;
}

DevicePtr CachingAllocator::allocate(std::size_t bytes, Stream stream) {
  std::size_t rounded = round_size(bytes);
  std::lock_guard lock(mutex_);
  if (!capturing_.empty()) {
    if (auto c = capturing_.find(stream); c != capturing_.end()) {
      DevicePtr p = take_from_pool(rounded, stream, c->second);
      ++stats_.num_allocs;
      stats_.allocated += live_[p].size;
      stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
      return p;
    }
  }
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
  const Block block = it->second;
  live_.erase(it);
  stats_.allocated -= block.size;
  if (block.pool != 0) {
    GraphPool& pool = pools_.at(block.pool);
    if (!pool.released) {
      pool.free.emplace(block.size, ptr);
      return;
    }
    stats_.graph_pool_bytes -= block.size;
  }
  stream_free_.emplace(std::pair{block.stream, block.size}, ptr);
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

int CachingAllocator::create_graph_pool() {
  std::lock_guard lock(mutex_);
  pools_[next_pool_];
  return next_pool_++;
}

void CachingAllocator::begin_graph_pool(Stream stream, int pool) {
  std::lock_guard lock(mutex_);
  KILN_CHECK(pools_.count(pool) && !pools_.at(pool).released,
             "CachingAllocator::begin_graph_pool: pool {} does not exist or was released", pool);
  KILN_CHECK(capturing_.emplace(stream, pool).second,
             "CachingAllocator::begin_graph_pool: the stream allocates from pool {} already",
             capturing_.at(stream));
  pools_.at(pool).stream = stream;
}

void CachingAllocator::end_graph_pool(Stream stream) {
  std::lock_guard lock(mutex_);
  capturing_.erase(stream);
}

void CachingAllocator::release_graph_pool(int pool) {
  std::lock_guard lock(mutex_);
  auto it = pools_.find(pool);
  if (it == pools_.end() || it->second.released) return;
  it->second.released = true;
  // Free blocks go to the shared cache: a replay queued before may still read them, so they
  // wait for a stream's release or a synchronization like any block freed on a stream would.
  for (auto [size, p] : it->second.free) {
    stats_.graph_pool_bytes -= size;
    stream_free_.emplace(std::pair{it->second.stream, size}, p);
  }
  it->second.free.clear();
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
