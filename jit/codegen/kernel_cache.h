// Where generated kernels are compiled (once per process: source -> loaded CUDA function; the
// cache/ directory builds the keyed, on-disk cache over this) and launched (counted in
// launch_stats()).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/cuda/backend.h"
#include "runtime/tensor.h"

namespace kiln::jit::codegen {

// The entry point `name` of `source`, compiled by NVRTC for the current device on first use.
cuda::Function compiled_function(const std::string& name, const std::string& source);

// Compiles if needed and launches the kernel, counting the launch and the global bytes its
// plan reads and writes.
void launch_generated(const std::string& name, const std::string& source, cuda::Dim3 grid,
                      cuda::Dim3 block, void** params, std::int64_t bytes_read,
                      std::int64_t bytes_written);
// Blocks of `block` threads for a grid-stride loop over n elements (a few waves at most).
unsigned grid_stride_blocks(long long n, unsigned block);
std::int64_t tensor_bytes(const Tensor& t);

}  // namespace kiln::jit::codegen
