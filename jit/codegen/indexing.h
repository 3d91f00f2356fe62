// Kernels for ops with data-dependent or piecewise addressing (templates/indexing.cu): gather,
// index_select, scatter_add, index_add, cumsum, cat and pad, one thread per output element. An
// index out of range is reported back and raised as kiln::IndexError naming the op.
#pragma once

#include <span>
#include <string>

#include "jit/codegen/kernel_cache.h"
#include "runtime/op.h"
#include "runtime/tensor.h"

namespace kiln::jit::codegen {

struct IndexingKernel {
  OpId op;
  KernelHandle handle;
};

// Whether `op` runs on this template: the table's index, scan and movement ops.
bool has_indexing_kernel(OpId op);
IndexingKernel render_indexing(OpId op, const OpAttrs& attrs, std::span<const Tensor> inputs,
                               const TensorMeta& out);
Tensor run_indexing(const IndexingKernel& kernel, const OpAttrs& attrs,
                    std::span<const Tensor> inputs, const TensorMeta& out);

}  // namespace kiln::jit::codegen
