// The page-locked host allocations a backend made (host_alloc), so that an upload can tell
// whether its source is pinned (queued, no wait) or pageable (waits, counted).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace kiln::cuda {

class PinnedRanges {
 public:
  void add(const void* ptr, std::size_t bytes) {
    std::lock_guard lock(mutex_);
    ranges_[address(ptr)] = bytes;
  }
  // False when `ptr` is not the start of a range added before.
  bool remove(const void* ptr) {
    std::lock_guard lock(mutex_);
    return ranges_.erase(address(ptr)) == 1;
  }
  // Whether [ptr, ptr + bytes) lies inside one range.
  bool contains(const void* ptr, std::size_t bytes) const {
    std::lock_guard lock(mutex_);
    auto it = ranges_.upper_bound(address(ptr));
    if (it == ranges_.begin()) return false;
    --it;
    return address(ptr) + bytes <= it->first + it->second;
  }

 private:
  static std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::size_t> ranges_;
};

}  // namespace kiln::cuda
