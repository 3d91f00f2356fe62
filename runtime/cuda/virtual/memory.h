// Device memory of the virtual GPU: host memory handed out 256-byte aligned, with an interval
// map of live and recently freed allocations so every access can be checked and a fault can
// name the nearest allocation (or say it was freed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>

namespace kiln::cuda::vgpu {

struct Allocation {
  std::uint64_t base = 0;
  std::uint64_t size = 0;      // bytes the user asked for; accesses past it fault
  std::uint64_t reserved = 0;  // bytes actually held (>= size, 256-aligned)
  std::string label;           // "" for alloc(); the variable name for module globals
};

class MemoryMap {
 public:
  MemoryMap() = default;
  MemoryMap(const MemoryMap&) = delete;
  MemoryMap& operator=(const MemoryMap&) = delete;
  ~MemoryMap();

  std::uint64_t alloc(std::size_t bytes, std::string label = {});
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

 private:
  std::map<std::uint64_t, Allocation> live_;
  std::map<std::uint64_t, Allocation> freed_;  // still held (quarantine) so addresses are not
                                               // reused at once and use-after-free is caught
  std::deque<std::uint64_t> quarantine_;
  std::size_t quarantine_bytes_ = 0;
  std::size_t live_bytes_ = 0;
  void release_oldest();
};

std::string hex(std::uint64_t v);

}  // namespace kiln::cuda::vgpu
