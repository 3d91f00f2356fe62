// Generated kernels in this process: a KernelHandle is one kernel as plans hold it, resolved to
// a loaded CUDA function once (memory -> cache/'s disk store -> NVRTC), so that a warm launch
// reads a pointer: no hashing of its source, no lock. Launches are counted in launch_stats().
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "runtime/cuda/backend.h"
#include "runtime/tensor.h"

namespace kiln::jit::codegen {

// A kernel's entry point and CUDA C++ source, and the function it loads to. Copies share the
// resolved function. The memory cache behind it is keyed by the kernel's code (the source
// without comments, cache::kernel_code): the same code from two graphs is one load.
class KernelHandle {
 public:
  KernelHandle() = default;
  KernelHandle(std::string name, std::string source);

  const std::string& name() const;
  const std::string& source() const;
  bool empty() const { return !state_; }
  bool resolved() const;

  // The loaded function: from memory, the disk cache or NVRTC on the first call (under the
  // memory cache's lock), then one atomic load.
  cuda::Function function() const;
  // Launches on the current backend, counting the launch and the global bytes its plan reads
  // and writes.
  void launch(cuda::Dim3 grid, cuda::Dim3 block, void** params, std::int64_t bytes_read,
              std::int64_t bytes_written) const;
  // The same with `dynamic_shared` bytes of dynamic shared memory: the function opts in to it
  // (cuFuncSetAttribute, needed past 48 KiB in all) at its first such launch, once per size.
  void launch(cuda::Dim3 grid, cuda::Dim3 block, unsigned dynamic_shared, void** params,
              std::int64_t bytes_read, std::int64_t bytes_written) const;

 private:
  friend void prepare_kernels(std::span<const KernelHandle* const> kernels);
  struct State;
  std::shared_ptr<State> state_;
};

// Resolves every unresolved handle before a plan's first launch: what memory or the disk cache
// holds is loaded, the rest compiles as ONE NVRTC program (identical code once), with a progress
// bar on a terminal when there are several.
void prepare_kernels(std::span<const KernelHandle* const> kernels);

// Blocks of `block` threads for a grid-stride loop over n elements (a few waves at most).
unsigned grid_stride_blocks(long long n, unsigned block);
std::int64_t tensor_bytes(const Tensor& t);
// A CUDA tensor's data as a kernel's pointer argument.
inline cuda::DevicePtr device_address(const Tensor& t) {
  return reinterpret_cast<cuda::DevicePtr>(t.raw_data());
}

}  // namespace kiln::jit::codegen
