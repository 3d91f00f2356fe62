// kiln::cuda::CachingAllocator: a caching device-memory allocator over a Backend, so steady-state
// training steps reuse blocks instead of calling cuMemAlloc/cuMemFree.
//
// Size classes: a request of up to 1 MiB is rounded up to a multiple of 512 B; a larger one to a
// multiple of 2 MiB. Blocks are never split or merged; a cached block serves a request whose
// rounded size r satisfies r <= block size <= 2r (best fit), so waste stays under half a block.
//
// Streams: a block freed on stream S (the stream it was allocated on) may still be read by work
// queued on S, so it is reused only for requests on S. Once the caller knows S has drained it
// calls `release_stream(S)` (the allocator synchronizes S and moves its free blocks to a pool
// every stream may use); `empty_cache()` synchronizes the device first. No events are recorded:
// cross-stream use of a block is the caller's business (as with record_stream in PyTorch).
//
// CUDA graphs: while a stream captures into a graph pool (begin_graph_pool), its allocations
// come from blocks only that pool reuses, taken from the backend in relaxed capture mode (as
// PyTorch's private pools are). A graph's replays write the blocks its capture was given, so no
// one else may have them while the graph lives; release_graph_pool returns them to the cache as
// they are freed.
//
// Out of memory: when the backend's alloc throws (or the optional `memory_limit` would be
// exceeded) the allocator empties its cache and retries once, then throws OutOfMemoryError
// with the request size and the stats.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "runtime/cuda/backend.h"
#include "runtime/error.h"

namespace kiln::cuda {

struct AllocatorStats {
  std::size_t allocated = 0;       // bytes in blocks handed out and not yet freed (rounded sizes)
  std::size_t reserved = 0;        // bytes obtained from the backend and not returned to it
  std::size_t peak_allocated = 0;  // the largest `allocated` since creation or reset_peak()
  std::size_t num_allocs = 0;      // successful allocate() calls
  std::size_t num_cache_hits = 0;  // allocate() calls served from the cache
  std::size_t num_backend_allocs = 0;
  std::size_t num_backend_frees = 0;
  std::size_t num_oom_retries = 0;  // times the cache was emptied to retry a failed alloc
  std::size_t graph_pool_bytes = 0;  // bytes of blocks graph pools hold, in use or not
  std::string to_string() const;
};

struct AllocatorOptions {
  // 0: no limit. Otherwise `reserved` never exceeds it; going over behaves like a backend OOM.
  std::size_t memory_limit = 0;
};

class OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(std::string message, std::size_t requested)
      : Error(std::move(message)), requested_(requested) {}
  std::size_t requested() const { return requested_; }

 private:
  std::size_t requested_;
};

class CachingAllocator {
 public:
  static constexpr std::size_t kSmallLimit = 1 << 20;  // requests up to this are "small"
  static constexpr std::size_t kSmallRound = 512;
  static constexpr std::size_t kLargeRound = 2 << 20;

  explicit CachingAllocator(Backend& backend, AllocatorOptions options = {});
  ~CachingAllocator();  // returns cached blocks; blocks still allocated are left to the backend
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` for use on `stream`. Thread-safe.
  DevicePtr allocate(std::size_t bytes, Stream stream = nullptr);
  // Returns a block from allocate() to the cache. nullptr is a no-op; anything else unknown throws.
  void deallocate(DevicePtr ptr);
  // The usable size of a live block (its rounded size).
  std::size_t block_size(DevicePtr ptr) const;

  // Synchronizes `stream`, then lets its cached blocks serve any stream.
  void release_stream(Stream stream);
  // Synchronizes the device and returns every cached block to the backend (blocks of graph pools
  // stay theirs).
  void empty_cache();

  // A new graph pool's id (never 0).
  int create_graph_pool();
  // Allocations on `stream` come from `pool` until end_graph_pool(stream).
  void begin_graph_pool(Stream stream, int pool);
  void end_graph_pool(Stream stream);
  // The pool's graph is gone: its free blocks, and its live ones once freed, serve everyone.
  void release_graph_pool(int pool);

  AllocatorStats stats() const;
  void reset_peak();
  Backend& backend() const { return backend_; }

  static std::size_t round_size(std::size_t bytes);

 private:
  struct Block {
    std::size_t size = 0;
    Stream stream = nullptr;
    int pool = 0;  // the graph pool it belongs to, 0: none
  };
  struct GraphPool {
    std::multimap<std::size_t, DevicePtr> free;
    Stream stream = nullptr;  // the stream its blocks were allocated on
    bool released = false;
  };
  DevicePtr take_from_pool(std::size_t rounded, Stream stream, int pool);
  DevicePtr take_cached(std::size_t rounded, Stream stream);  // 0 when none fits
  DevicePtr backend_alloc(std::size_t rounded);               // throws on failure
  void free_cached_locked();

  Backend& backend_;
  AllocatorOptions options_;
  mutable std::mutex mutex_;
  std::unordered_map<DevicePtr, Block> live_;
  // Cached blocks usable only on their stream, keyed (stream, size); and usable on any stream.
  std::multimap<std::pair<Stream, std::size_t>, DevicePtr> stream_free_;
  std::multimap<std::size_t, DevicePtr> shared_free_;
  std::unordered_map<Stream, int> capturing_;  // streams allocating from a graph pool
  std::map<int, GraphPool> pools_;
  int next_pool_ = 1;
  AllocatorStats stats_;
};

}  // namespace kiln::cuda
