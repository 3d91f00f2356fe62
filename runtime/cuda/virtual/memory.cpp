// Checked device memory (see memory.h).
#include "runtime/cuda/virtual/memory.h"

#include <fmt/format.h>

#include <cstdlib>

#include "runtime/cuda/virtual/global_check.h"
#include "runtime/error.h"

namespace kiln::cuda::vgpu {
namespace {
constexpr std::size_t kQuarantineLimit = 256u << 20;
constexpr std::size_t kAlign = 256;
}  // namespace

std::string hex(std::uint64_t v) {
  return fmt::format("{:#x}", v);
}

MemoryMap::~MemoryMap() {
  for (auto& [base, a] : live_) std::free(reinterpret_cast<void*>(base));
  for (auto& [base, a] : freed_)  // reserved == 0: released from quarantine already
    if (a.reserved) std::free(reinterpret_cast<void*>(base));
}

std::uint64_t MemoryMap::alloc(std::size_t bytes, std::string label, bool track_init) {
  std::size_t reserved = (std::max<std::size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, reserved);
  KILN_CHECK(p != nullptr, "virtual GPU: out of memory allocating {} bytes ({} bytes live)", bytes,
             live_bytes_);
  auto base = reinterpret_cast<std::uint64_t>(p);
  // A fresh block may cover addresses remembered as freed: forget those records.
  for (auto it = freed_.lower_bound(base); it != freed_.end() && it->first < base + reserved;)
    it = freed_.erase(it);
  auto shadow = std::make_shared<AllocShadow>();
  if (track_init) {
    shadow->init.assign((bytes + 63) / 64, 0);
    ++tracked_;
  }
  live_[base] = Allocation{base, bytes, reserved, std::move(label), std::move(shadow)};
  live_bytes_ += bytes;
  return base;
}

void MemoryMap::free(std::uint64_t ptr) {
  if (ptr == 0) return;  // like cuMemFree(0)? the driver rejects it; freeing null is harmless
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    KILN_CHECK(!is_freed(ptr), "virtual GPU: double free of device pointer {}", hex(ptr));
    const Allocation* inside = find(ptr, 1);
    KILN_CHECK(inside == nullptr,
               "virtual GPU: free of device pointer {} which is inside allocation {}[{} bytes], "
               "not its start",
               hex(ptr), hex(inside ? inside->base : 0), inside ? inside->size : 0);
    throw Error(
        fmt::format("virtual GPU: free of device pointer {} which was never allocated", hex(ptr)));
  }
  Allocation a = std::move(it->second);
  live_.erase(it);
  if (!a.shadow->init.empty()) --tracked_;
  a.shadow.reset();
  live_bytes_ -= a.size;
  quarantine_bytes_ += a.reserved;
  quarantine_.push_back(a.base);
  std::uint64_t base = a.base;
  freed_[base] = std::move(a);
  while (quarantine_bytes_ > kQuarantineLimit && !quarantine_.empty()) release_oldest();
}

void MemoryMap::release_oldest() {
  std::uint64_t base = quarantine_.front();
  quarantine_.pop_front();
  auto it = freed_.find(base);
  if (it == freed_.end()) return;
  quarantine_bytes_ -= it->second.reserved;
  std::free(reinterpret_cast<void*>(base));
  // Keep the record (the address may still be named in a message) until it is reused.
  it->second.reserved = 0;
}

const Allocation* MemoryMap::find(std::uint64_t addr, std::uint64_t size) const {
  auto it = live_.upper_bound(addr);
  if (it == live_.begin()) return nullptr;
  --it;
  const Allocation& a = it->second;
  if (addr >= a.base && addr + size <= a.base + a.size && addr + size >= addr) return &a;
  return nullptr;
}

bool MemoryMap::is_freed(std::uint64_t addr) const {
  auto it = freed_.upper_bound(addr);
  if (it == freed_.begin()) return false;
  --it;
  return addr >= it->second.base &&
         addr < it->second.base + std::max<std::uint64_t>(it->second.size, 1);
}

static std::string describe(const Allocation& a) {
  std::string s = fmt::format("{}[{} bytes]", hex(a.base), a.size);
  if (!a.label.empty()) s += fmt::format(" ('{}')", a.label);
  return s;
}

std::string MemoryMap::explain(std::uint64_t addr, std::uint64_t size) const {
  if (addr == 0) return "null pointer";
  // Freed allocation holding the address (and no live one): use after free.
  {
    auto it = freed_.upper_bound(addr);
    if (it != freed_.begin()) {
      --it;
      const Allocation& a = it->second;
      if (addr >= a.base && addr < a.base + std::max<std::uint64_t>(a.size, 1))
        return fmt::format("allocation {} was freed (use after free)", describe(a));
    }
  }
  // Straddling the end of a live allocation.
  auto after = live_.upper_bound(addr);
  if (after != live_.begin()) {
    auto prev = std::prev(after);
    const Allocation& a = prev->second;
    if (addr >= a.base && addr < a.base + a.size)
      return fmt::format("access runs {} bytes past the end of allocation {}",
                         addr + size - (a.base + a.size), describe(a));
  }
  const Allocation* below = after != live_.begin() ? &std::prev(after)->second : nullptr;
  const Allocation* above = after != live_.end() ? &after->second : nullptr;
  std::uint64_t dist_below = below ? addr - (below->base + below->size) : ~0ull;
  std::uint64_t dist_above = above ? above->base - addr : ~0ull;
  if (!below && !above) return "no device memory is allocated";
  if (dist_below <= dist_above)
    return fmt::format("nearest allocation {} ends {} bytes before", describe(*below), dist_below);
  return fmt::format("nearest allocation {} starts {} bytes after", describe(*above), dist_above);
}

void MemoryMap::check_range(std::uint64_t addr, std::uint64_t size, const char* what) const {
  if (size == 0) return;
  if (find(addr, size)) return;
  throw Error(fmt::format("virtual GPU: {} of {} bytes at {}: {}", what, size, hex(addr),
                          explain(addr, size)));
}

}  // namespace kiln::cuda::vgpu

namespace kiln::cuda::vgpu {

void MemoryMap::mark_initialized(std::uint64_t addr, std::uint64_t size) {
  if (!tracked_ || !size) return;
  const Allocation* a = find(addr, size);
  if (a && !a->shadow->init.empty()) a->shadow->mark_init(addr - a->base, size);
}

void MemoryMap::forget_init() {
  if (!tracked_) return;
  for (auto& [base, a] : live_) std::vector<std::uint64_t>().swap(a.shadow->init);
  tracked_ = 0;
}

std::uint32_t MemoryMap::reserve_blocks(std::uint64_t count) {
  if (count >= 0xffffffffull - next_serial_) {
    for (auto& [base, a] : live_) a.shadow->race.reset(), a.shadow->granules = 0;
    next_serial_ = 1;
    KILN_CHECK(count < 0xfffffff0ull, "virtual GPU: a launch of {} blocks is too large", count);
  }
  std::uint32_t first = next_serial_;
  next_serial_ += static_cast<std::uint32_t>(count);
  return first;
}

}  // namespace kiln::cuda::vgpu
