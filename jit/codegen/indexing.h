// Kernels for ops with data-dependent or piecewise addressing (templates/indexing.cu): gather,
// index_select, scatter_add, index_add, index_copy, cumsum, cat and pad, one thread per output
// element. An index out of range is reported back and raised as kiln::IndexError naming the op.
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
  bool in_place_rows = false;  // index_copy's rows form (render_index_copy_rows)
};

// Whether `op` runs on this template: the table's index, scan and movement ops.
bool has_indexing_kernel(OpId op);
IndexingKernel render_indexing(OpId op, const OpAttrs& attrs, std::span<const Tensor> inputs,
                               const TensorMeta& out);
Tensor run_indexing(const IndexingKernel& kernel, const OpAttrs& attrs,
                    std::span<const Tensor> inputs, const TensorMeta& out);

// index_copy in place: one thread per element of source (inputs[2]) writes it over self's
// (inputs[0]) slice the index names, through self's strides; nothing else of self is touched.
// What a plan runs where the op's result is the final value of the input it reads as self.
IndexingKernel render_index_copy_rows(std::span<const Tensor> inputs);
void run_index_copy_rows(const IndexingKernel& kernel, const OpAttrs& attrs,
                         std::span<const Tensor> inputs);

}  // namespace kiln::jit::codegen
