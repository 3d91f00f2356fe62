// Tensor memory on CUDA devices: storage from the process-wide caching allocator over the
// backend KILN_CUDA selects (a real GPU or the virtual GPU), and copies between host and device.
#pragma once

#include <memory>

#include "runtime/cuda/allocator.h"
#include "runtime/tensor.h"

namespace kiln {

// The allocator behind every CUDA tensor (created on first use).
cuda::CachingAllocator& cuda_allocator();

// Zeroed device memory for `device` (a CUDA device), freed back to the allocator.
std::shared_ptr<Storage> allocate_cuda_storage(std::size_t nbytes, Device device);

// A contiguous copy of `t` (on any device) on `device`. No autograd: see Tensor::to(Device).
Tensor copy_to_device(const Tensor& t, Device device);

}  // namespace kiln
