// Device memory of the virtual GPU: host memory handed out 256-byte aligned, with an interval
// map of live and recently freed allocations so every access can be checked and a fault can
// name the nearest allocation (or say it was freed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>

namespace kiln::cuda::vgpu {

struct AllocShadow;  // global_check.h: init bitmap and race records

struct Allocation {
  std::uint64_t base = 0;
  std::uint64_t size = 0;               // bytes the user asked for; accesses past it fault
  std::uint64_t reserved = 0;           // bytes actually held (>= size, 256-aligned)
  std::string label;                    // "" for alloc(); the variable name for module globals
  std::shared_ptr<AllocShadow> shadow;  // never null for a live allocation
};

class MemoryMap {
 public:
  MemoryMap() = default;
  MemoryMap(const MemoryMap&) = delete;
  MemoryMap& operator=(const MemoryMap&) = delete;
  ~MemoryMap();

  // `track_init`: the bytes start uninitialized for initcheck (else they count as initialized).
  std::uint64_t alloc(std::size_t bytes, std::string label = {}, bool track_init = false);
  void free(std::uint64_t ptr);  // throws on a pointer that is not a live allocation's base

  // The live allocation holding [addr, addr+size), or nullptr.
  const Allocation* find(std::uint64_t addr, std::uint64_t size) const;
  // Why [addr, addr+size) is not accessible: "nearest allocation ... ends 4 bytes before", or
  // "allocation ... was freed".
  std::string explain(std::uint64_t addr, std::uint64_t size) const;
  bool is_freed(std::uint64_t addr) const;
  // Throws kiln::Error "<what>: <explain>" unless the range lies in one live allocation.
  void check_range(std::uint64_t addr, std::uint64_t size, const char* what) const;

  std::size_t live_bytes() const { return live_bytes_; }

  // initcheck bookkeeping (global_check.h): a host copy or memset initialized [addr, addr+size);
  // a launch ran without initcheck, so every allocation now counts as initialized.
  void mark_initialized(std::uint64_t addr, std::uint64_t size);
  void forget_init();
  // racecheck: `count` consecutive block serials for one launch (never 0); when the 32-bit
  // counter would wrap, every race record is dropped first.
  std::uint32_t reserve_blocks(std::uint64_t count);

 private:
  std::map<std::uint64_t, Allocation> live_;
  std::map<std::uint64_t, Allocation> freed_;  // still held (quarantine) so addresses are not
                                               // reused at once and use-after-free is caught
  std::deque<std::uint64_t> quarantine_;
  std::size_t quarantine_bytes_ = 0;
  std::size_t live_bytes_ = 0;
  std::size_t tracked_ = 0;  // allocations whose init bitmap is kept
  std::uint32_t next_serial_ = 1;
  void release_oldest();
};

std::string hex(std::uint64_t v);

}  // namespace kiln::cuda::vgpu
