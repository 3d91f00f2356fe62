// Extras of the virtual GPU beyond the Backend interface, for tests and benchmarks.
#pragma once

#include <cstdint>

#include "runtime/cuda/backend.h"

namespace kiln::cuda::vgpu {

// Thread-instructions executed by all launches of `backend` so far; throws kiln::Error if
// `backend` is not the virtual GPU.
std::uint64_t executed_thread_instructions(Backend& backend);

}  // namespace kiln::cuda::vgpu
