// The memory a kernel runner writes its outputs to, when its plan assigned them buffers.
#pragma once

#include <memory>
#include <span>

#include "runtime/storage.h"

namespace kiln::jit::codegen {

// Where a runner writes each value it writes, by its position among them: the buffer a plan
// assigned it (jit/buffer_assignment.h), or null, or past the end, for new memory.
using OutputBuffers = std::span<const std::shared_ptr<Storage>>;
inline std::shared_ptr<Storage> output_buffer(OutputBuffers into, std::size_t i) {
  return i < into.size() ? into[i] : nullptr;
}

}  // namespace kiln::jit::codegen
