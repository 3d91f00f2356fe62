// The launch limits a cuLaunchKernel call is checked against on the virtual GPU: grid and block
// dimensions, threads per block, the kernel's .maxntid/.reqntid, and shared memory with and
// without the function's opt-in. One function, so that a recorded graph node is checked as a
// launch is.
#pragma once

#include <cstdint>

#include "runtime/cuda/backend.h"
#include "runtime/cuda/virtual/program.h"

namespace kiln::cuda::vgpu {

// Throws LaunchError naming the kernel, grid and block and the limit the launch exceeds.
// `opted_in`/`max_dynamic_shared`: the function's MAX_DYNAMIC_SHARED_SIZE_BYTES, where set.
void validate_launch(const DeviceProperties& props, const Function& k, bool opted_in,
                     std::uint64_t max_dynamic_shared, Dim3 grid, Dim3 block, unsigned dyn);

}  // namespace kiln::cuda::vgpu
