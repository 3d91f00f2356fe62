// Where generated kernels are compiled (once per process: source -> loaded CUDA function, with
// cache/'s keyed disk cache behind the memory one) and launched (counted in
// launch_stats()).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/cuda/backend.h"
#include "runtime/tensor.h"

namespace kiln::jit::codegen {

// The entry point `name` of `source` for the current device: from memory, else from the disk
// cache (cache/), else compiled by NVRTC and stored there.
cuda::Function compiled_function(const std::string& name, const std::string& source);

struct KernelSource {
  std::string name;
  std::string source;
};
// Makes every kernel of a plan ready before its first launch: loads what the disk cache has,
// then compiles the rest, drawing a progress bar on a terminal when there are several.
void prepare_kernels(const std::vector<KernelSource>& kernels);

// Compiles if needed and launches the kernel, counting the launch and the global bytes its
// plan reads and writes.
void launch_generated(const std::string& name, const std::string& source, cuda::Dim3 grid,
                      cuda::Dim3 block, void** params, std::int64_t bytes_read,
                      std::int64_t bytes_written);
// Blocks of `block` threads for a grid-stride loop over n elements (a few waves at most).
unsigned grid_stride_blocks(long long n, unsigned block);
std::int64_t tensor_bytes(const Tensor& t);

}  // namespace kiln::jit::codegen
