// The sort and topk kernels (templates/sort.cu): a row's chunks sorted in shared memory, then
// merged pairwise, topk truncating every run to k. One launch for rows of up to 2048 values,
// one more per doubling past that.
#pragma once

#include <span>
#include <vector>

#include "jit/codegen/kernel_cache.h"
#include "runtime/op.h"
#include "runtime/tensor.h"

namespace kiln::jit::codegen {

struct SortKernel {
  OpId op = OpId::sort;
  KernelHandle chunks;  // sorts each chunk of a row
  KernelHandle merge;   // merges pairs of sorted runs
};

// For x's dtype and the sort direction in attrs.
SortKernel render_sort(OpId op, const OpAttrs& attrs, DType dtype);
// Values and i64 indices, shaped as `outputs`.
std::vector<Tensor> run_sort(const SortKernel& kernel, const OpAttrs& attrs, const Tensor& x,
                             std::span<const TensorMeta> outputs);

}  // namespace kiln::jit::codegen
