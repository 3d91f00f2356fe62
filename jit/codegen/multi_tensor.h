// CUDA's multi-tensor updates (runtime/multi_tensor.h): AdamW, SGD, gradient-norm clipping and
// gradient accumulation over a whole list of tensors, one generated kernel per dtype group
// (templates/multi_tensor.cu and multi_tensor_norm.cu) reading a device table of pointers, sizes
// and chunk starts. A caller's table is uploaded again only when a tensor moved, so a warm step is
// launches alone. Registered for CUDA tensors when kiln_jit loads.
#pragma once

#include <cstdint>

namespace kiln::jit::codegen {

// Elements per chunk, the unit of work a block takes from the table.
inline constexpr std::int64_t kMultiTensorChunk = 4096;

// Device tables uploaded by this process (each is one host-to-device copy).
std::int64_t multi_tensor_table_uploads();

}  // namespace kiln::jit::codegen
