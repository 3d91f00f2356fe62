// Generated kernels compiled once per process: source -> loaded CUDA function. The cache/
// directory builds the keyed, on-disk cache over this.
#pragma once

#include <string>

#include "runtime/cuda/backend.h"

namespace kiln::jit::codegen {

// The entry point `name` of `source`, compiled by NVRTC for the current device on first use.
cuda::Function compiled_function(const std::string& name, const std::string& source);

}  // namespace kiln::jit::codegen
