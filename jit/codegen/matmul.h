// The generated GEMM (templates/matmul.cu): batched, broadcasting, strided operands, wide
// accumulation. What matmul runs as on the device until the cuBLASLt lowering takes it, and
// the fallback for the problems cuBLASLt refuses.
#pragma once

#include <string>

#include "jit/codegen/kernel_cache.h"
#include "runtime/op.h"
#include "runtime/tensor.h"

namespace kiln::jit::codegen {

struct MatmulKernel {
  KernelHandle handle;
};

// The kernel for operands of these dtypes and batch rank, writing `out`'s dtype.
MatmulKernel render_matmul(DType a, DType b, DType out, int batch_rank);
// out = a @ b for CUDA tensors of rank >= 2 (shapes already checked by the op's inference).
Tensor run_matmul(const MatmulKernel& kernel, const Tensor& a, const Tensor& b,
                  const TensorMeta& out);

}  // namespace kiln::jit::codegen
