// Device-to-device copies of any layout: one generated kernel per element size that reads and
// writes through strides, so that an eager write into a view of a CUDA tensor
// (`cache.slice(2, p, p + 1).copy_(k)`) moves only the elements it names.
#pragma once

#include "runtime/tensor.h"

namespace kiln::jit::codegen {

// Copies `src` into `dst`: both on one CUDA device, of one shape and dtype, any strides.
void strided_copy(const Tensor& dst, const Tensor& src);

}  // namespace kiln::jit::codegen
