// Factories for the two CUDA backends; `backend()` in backend.h picks one from KILN_CUDA.
#pragma once

#include <memory>

#include "runtime/cuda/backend.h"

namespace kiln::cuda {

// dlopens libcuda.so.1; throws kiln::Error saying so when there is no driver or no GPU.
std::unique_ptr<Backend> make_driver_backend();

// The PTX interpreter: device memory is checked host memory.
std::unique_ptr<Backend> make_virtual_backend();

}  // namespace kiln::cuda
