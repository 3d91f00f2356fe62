// Tests of the caching device allocator against a fake Backend that counts calls and can run
// out of memory, plus one round trip through the virtual GPU.
#include <atomic>
#include <boost/test/unit_test.hpp>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "runtime/cuda/allocator.h"
#include "runtime/cuda/selection.h"

namespace {

using kiln::cuda::CachingAllocator;
using kiln::cuda::DevicePtr;
using kiln::cuda::Stream;

// Hands out fake addresses; `capacity` bytes at most, beyond which alloc throws like a real OOM.
class FakeBackend final : public kiln::cuda::Backend {
 public:
  explicit FakeBackend(std::size_t capacity = SIZE_MAX) : capacity_(capacity) {}
  std::string_view kind() const override { return "fake"; }
  int device_count() override { return 1; }
  const kiln::cuda::DeviceProperties& properties(int) override { return props_; }
  DevicePtr alloc(std::size_t bytes) override {
    std::lock_guard lock(mutex_);
    if (capturing && mode_ != kiln::cuda::CaptureMode::relaxed)
      throw kiln::Error("fake alloc during a capture outside relaxed mode");
    if (in_use_ + bytes > capacity_)
      throw kiln::Error(fmt::format("fake alloc({}): out of memory ({} of {} in use)", bytes,
                                    in_use_, capacity_));
    DevicePtr p = next_;
    next_ += bytes + 4096;
    live_[p] = bytes;
    in_use_ += bytes;
    ++allocs;
    return p;
  }
  void free(DevicePtr p) override {
    std::lock_guard lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end()) throw kiln::Error("fake free of an unknown pointer");
    in_use_ -= it->second;
    live_.erase(it);
    ++frees;
  }
  void copy_to_device(DevicePtr, const void*, std::size_t, Stream) override {}
  void copy_to_host(void*, DevicePtr, std::size_t, Stream) override {}
  void copy_device(DevicePtr, DevicePtr, std::size_t, Stream) override {}
  void* host_alloc(std::size_t) override { return nullptr; }
  void host_free(void*) override {}
  void memset8(DevicePtr, std::uint8_t, std::size_t, Stream) override {}
  kiln::cuda::Module load_module(std::string_view) override { return nullptr; }
  void unload_module(kiln::cuda::Module) override {}
  kiln::cuda::Function get_function(kiln::cuda::Module, const std::string&) override {
    return nullptr;
  }
  void set_max_dynamic_shared(kiln::cuda::Function, unsigned) override {}
  void launch(kiln::cuda::Function, kiln::cuda::Dim3, kiln::cuda::Dim3, unsigned, Stream,
              void**) override {}
  Stream create_stream() override { return nullptr; }
  void destroy_stream(Stream) override {}
  void synchronize_stream(Stream) override { ++stream_syncs; }
  kiln::cuda::Event create_event() override { return nullptr; }
  void destroy_event(kiln::cuda::Event) override {}
  void record_event(kiln::cuda::Event, Stream) override {}
  void wait_event(Stream, kiln::cuda::Event) override {}
  void synchronize_event(kiln::cuda::Event) override {}
  bool event_done(kiln::cuda::Event) override { return true; }
  float elapsed_ms(kiln::cuda::Event, kiln::cuda::Event) override { return 0; }
  void synchronize() override { ++device_syncs; }
  // A capture forbids allocations outside relaxed mode, as CUDA's global mode does.
  void begin_capture(Stream, kiln::cuda::CaptureMode) override { capturing = true; }
  kiln::cuda::GraphExec end_capture(Stream) override {
    capturing = false;
    return nullptr;
  }
  bool is_capturing(Stream) override { return capturing; }
  kiln::cuda::CaptureMode exchange_capture_mode(kiln::cuda::CaptureMode mode) override {
    return std::exchange(mode_, mode);
  }
  void launch_graph(kiln::cuda::GraphExec, Stream) override {}
  void destroy_graph(kiln::cuda::GraphExec) override {}

  std::size_t in_use() {
    std::lock_guard lock(mutex_);
    return in_use_;
  }
  int allocs = 0, frees = 0, stream_syncs = 0, device_syncs = 0;
  bool capturing = false;

 private:
  kiln::cuda::CaptureMode mode_ = kiln::cuda::CaptureMode::global;
  std::mutex mutex_;
  kiln::cuda::DeviceProperties props_;
  std::size_t capacity_;
  std::size_t in_use_ = 0;
  DevicePtr next_ = 0x10000;
  std::map<DevicePtr, std::size_t> live_;
};

Stream stream(int i) {
  return reinterpret_cast<Stream>(static_cast<std::uintptr_t>(0x1000 * i));
}
constexpr std::size_t MiB = 1 << 20;

BOOST_AUTO_TEST_SUITE(allocator)

BOOST_AUTO_TEST_CASE(size_classes) {
  BOOST_TEST(CachingAllocator::round_size(0) == 512u);
  BOOST_TEST(CachingAllocator::round_size(1) == 512u);
  BOOST_TEST(CachingAllocator::round_size(512) == 512u);
  BOOST_TEST(CachingAllocator::round_size(513) == 1024u);
  BOOST_TEST(CachingAllocator::round_size(MiB) == MiB);
  BOOST_TEST(CachingAllocator::round_size(MiB + 1) == 2 * MiB);
  BOOST_TEST(CachingAllocator::round_size(5 * MiB) == 6 * MiB);
  BOOST_CHECK_THROW(CachingAllocator::round_size(SIZE_MAX - 10), kiln::Error);
}

BOOST_AUTO_TEST_CASE(reuse_and_stats) {
  FakeBackend fake;
  CachingAllocator a(fake);
  DevicePtr p = a.allocate(1000);
  BOOST_TEST(a.block_size(p) == 1024u);
  auto s = a.stats();
  BOOST_TEST(s.allocated == 1024u);
  BOOST_TEST(s.reserved == 1024u);
  BOOST_TEST(s.num_allocs == 1u);
  BOOST_TEST(s.num_cache_hits == 0u);
  a.deallocate(p);
  BOOST_TEST(a.stats().allocated == 0u);
  BOOST_TEST(a.stats().reserved == 1024u);  // cached, not returned
  DevicePtr q = a.allocate(900);            // same class: served from the cache
  BOOST_TEST(q == p);
  BOOST_TEST(a.stats().num_cache_hits == 1u);
  BOOST_TEST(fake.allocs == 1);
  DevicePtr big = a.allocate(3 * MiB);
  BOOST_TEST(a.block_size(big) == 4 * MiB);
  BOOST_TEST(a.stats().peak_allocated == 1024u + 4 * MiB);
  a.deallocate(big);
  // A cached 4 MiB block is too wasteful for 1 KiB (more than twice the request): a new block.
  DevicePtr small = a.allocate(1024);
  BOOST_TEST(small != big);
  BOOST_TEST(fake.allocs == 3);
  // ...but serves a 3 MiB request (rounded to 4 MiB).
  DevicePtr again = a.allocate(2 * MiB + 1);
  BOOST_TEST(again == big);
  BOOST_TEST(a.stats().peak_allocated == 2048u + 4 * MiB);
  a.deallocate(q);
  a.deallocate(small);
  a.deallocate(again);
  a.reset_peak();
  BOOST_TEST(a.stats().peak_allocated == 0u);
  BOOST_TEST(a.stats().num_allocs == 5u);
  BOOST_CHECK_THROW(a.deallocate(again), kiln::Error);   // double free
  BOOST_CHECK_THROW(a.deallocate(0xdead), kiln::Error);  // never allocated
  BOOST_CHECK_NO_THROW(a.deallocate(0));
  a.empty_cache();
  BOOST_TEST(a.stats().reserved == 0u);
  BOOST_TEST(fake.in_use() == 0u);
  BOOST_TEST(fake.frees == 3);
  BOOST_TEST(fake.device_syncs >= 1);
}

BOOST_AUTO_TEST_CASE(stream_aware_reuse) {
  FakeBackend fake;
  CachingAllocator a(fake);
  DevicePtr p = a.allocate(4096, stream(1));
  a.deallocate(p);
  DevicePtr q = a.allocate(4096, stream(2));  // stream 1 may still use p: not reused
  BOOST_TEST(q != p);
  DevicePtr r = a.allocate(4096, stream(1));  // same stream: reused
  BOOST_TEST(r == p);
  a.deallocate(r);
  a.deallocate(q);
  a.release_stream(stream(1));  // synchronizes stream 1; its blocks may now go anywhere
  BOOST_TEST(fake.stream_syncs == 1);
  DevicePtr s = a.allocate(4096, stream(3));
  BOOST_TEST(s == p);
  BOOST_TEST(a.stats().num_cache_hits == 2u);
  a.deallocate(s);
}

BOOST_AUTO_TEST_CASE(oom_empties_the_cache_and_retries) {
  FakeBackend fake(4 * MiB + MiB / 2);
  CachingAllocator a(fake);
  DevicePtr p = a.allocate(MiB);  // 1 MiB, then cached
  a.deallocate(p);
  DevicePtr q = a.allocate(3 * MiB + 1);  // 4 MiB: 1 + 4 > 4.5 until the cache is emptied
  BOOST_TEST(q != 0u);
  auto s = a.stats();
  BOOST_TEST(s.num_oom_retries == 1u);
  BOOST_TEST(s.reserved == 4 * MiB);
  BOOST_TEST(fake.frees == 1);
  // Nothing cached to free: a clear error with the request size and the stats.
  try {
    a.allocate(2 * MiB);
    BOOST_FAIL("expected OutOfMemoryError");
  } catch (const kiln::cuda::OutOfMemoryError& e) {
    std::string what = e.what();
    BOOST_TEST(e.requested() == 2 * MiB);
    BOOST_TEST(what.find("allocating 2097152 bytes") != std::string::npos, what);
    BOOST_TEST(what.find("reserved 4194304 B") != std::string::npos, what);
    BOOST_TEST(what.find("fake alloc") != std::string::npos, what);  // the backend's reason
  }
  BOOST_TEST(a.stats().allocated == 4 * MiB);  // the failure changed nothing
  a.deallocate(q);
}

BOOST_AUTO_TEST_CASE(memory_limit_option) {
  FakeBackend fake;
  CachingAllocator a(fake, {.memory_limit = 3 * MiB});
  DevicePtr p = a.allocate(2 * MiB);
  BOOST_CHECK_THROW(a.allocate(2 * MiB), kiln::cuda::OutOfMemoryError);
  BOOST_TEST(fake.allocs == 1);  // the limit stopped it before the backend
  a.deallocate(p);
  DevicePtr q = a.allocate(MiB);  // 1 MiB: the cached 2 MiB block fits within 2x
  BOOST_TEST(q == p);
  a.deallocate(q);
}

BOOST_AUTO_TEST_CASE(threads) {
  FakeBackend fake;
  CachingAllocator a(fake);
  std::mutex mutex;
  std::set<DevicePtr> live;
  std::atomic<int> overlaps{0};
  auto work = [&](int seed) {
    std::mt19937 rng(seed);
    std::vector<DevicePtr> mine;
    for (int i = 0; i < 2000; ++i) {
      if (mine.size() < 8 && rng() % 2) {
        DevicePtr p = a.allocate(rng() % (3 * MiB), stream(seed % 2));
        std::lock_guard lock(mutex);
        if (!live.insert(p).second) ++overlaps;  // a block handed out twice
        mine.push_back(p);
      } else if (!mine.empty()) {
        DevicePtr p = mine.back();
        mine.pop_back();
        {
          std::lock_guard lock(mutex);
          live.erase(p);
        }
        a.deallocate(p);
      }
    }
    for (auto p : mine) {
      {
        std::lock_guard lock(mutex);
        live.erase(p);
      }
      a.deallocate(p);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t <= 4; ++t) pool.emplace_back(work, t);
  for (auto& t : pool) t.join();
  BOOST_TEST(overlaps.load() == 0);
  auto s = a.stats();
  BOOST_TEST(s.allocated == 0u);
  BOOST_TEST(s.num_cache_hits > 0u);
  BOOST_TEST(s.reserved == fake.in_use());
  a.empty_cache();
  BOOST_TEST(fake.in_use() == 0u);
}

BOOST_AUTO_TEST_CASE(on_the_virtual_gpu) {
  auto& gpu = kiln::cuda::backend("virtual");
  CachingAllocator a(gpu);
  std::vector<int> host(1000);
  for (int i = 0; i < 1000; ++i) host[i] = i * 3;
  DevicePtr p = a.allocate(host.size() * sizeof(int));
  gpu.copy_to_device(p, host.data(), host.size() * sizeof(int));
  std::vector<int> back(1000, -1);
  gpu.copy_to_host(back.data(), p, back.size() * sizeof(int));
  BOOST_TEST(back == host);
  a.deallocate(p);
  BOOST_TEST(a.allocate(4000) == p);
  a.deallocate(p);
  a.empty_cache();
  BOOST_TEST(a.stats().reserved == 0u);
}

// A capture's allocations come from its graph's pool: taken from the backend in relaxed mode
// (the fake refuses others during a capture), reused only by that pool while the graph lives,
// and never handed to an allocation outside it, whose blocks a replay would overwrite.
BOOST_AUTO_TEST_CASE(graph_pool_keeps_its_blocks_for_the_graph) {
  FakeBackend fake;
  CachingAllocator a(fake);
  DevicePtr outside = a.allocate(1000, stream(1));
  a.deallocate(outside);  // cached for stream 1: a capture there must not take it
  const int pool = a.create_graph_pool();
  fake.begin_capture(stream(1), kiln::cuda::CaptureMode::global);
  a.begin_graph_pool(stream(1), pool);
  DevicePtr first = a.allocate(1000, stream(1));
  BOOST_TEST(first != outside);
  a.deallocate(first);                              // an intermediate of the captured work
  BOOST_TEST(a.allocate(900, stream(1)) == first);  // reused within the capture
  DevicePtr second = a.allocate(3000, stream(1));
  a.end_graph_pool(stream(1));
  fake.end_capture(stream(1));
  BOOST_TEST(a.stats().graph_pool_bytes == 1024u + 3072u);
  a.deallocate(first);
  a.deallocate(second);
  // Outside the capture nothing of the pool is handed out, though both blocks are free.
  DevicePtr later = a.allocate(1000, stream(1));
  BOOST_TEST(later == outside);
  DevicePtr other = a.allocate(3000, stream(1));
  BOOST_TEST(other != second);
  a.deallocate(later);
  a.deallocate(other);
  // Once the graph is gone its blocks serve everyone again.
  a.release_graph_pool(pool);
  BOOST_TEST(a.stats().graph_pool_bytes == 0u);
  std::set<DevicePtr> seen;
  std::vector<DevicePtr> taken;
  for (int i = 0; i < 2; ++i) taken.push_back(a.allocate(3000, stream(1)));
  for (DevicePtr p : taken) seen.insert(p);
  BOOST_TEST(seen.count(second) == 1u);
  for (DevicePtr p : taken) a.deallocate(p);
}

BOOST_AUTO_TEST_CASE(graph_pool_block_freed_after_release_returns_to_the_cache) {
  FakeBackend fake;
  CachingAllocator a(fake);
  const int pool = a.create_graph_pool();
  a.begin_graph_pool(stream(2), pool);
  DevicePtr output = a.allocate(2000, stream(2));  // a graph output a user still holds
  a.end_graph_pool(stream(2));
  a.release_graph_pool(pool);
  a.deallocate(output);
  BOOST_TEST(a.allocate(2000, stream(2)) == output);
  BOOST_CHECK_THROW(a.begin_graph_pool(stream(2), pool), kiln::Error);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
