// The generated GEMM (templates/matmul*.cu): batched, broadcasting, strided operands, wide
// accumulation. What matmul runs as on the device when the cuBLASLt lowering does not take it.
// f16/bf16 operands multiply on tensor cores (mma.sync.m16n8k16, f32 accumulation), f32 on TF32
// tensor cores when KILN_MATMUL_TF32=1; other dtypes on a tiled FMA kernel.
#pragma once

#include <memory>

#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/matmul_tiles.h"
#include "runtime/op.h"
#include "runtime/tensor.h"

namespace kiln::jit::codegen {

// Which kernel of the generated GEMM a call launches; each is its own kernel name.
struct MatmulVariant {
  bool tensor_cores = false;  // f16/bf16 operands on mma.sync.m16n8k16
  bool tf32 = false;          // f32 operands rounded to TF32, on mma.sync.m16n8k8
  // The tensor-core kernels' shared tiles: a's as [m][k] (else [k][m]), b's as [n][k] (else
  // [k][n]); the layout that keeps each operand's contiguous dim contiguous.
  bool a_k_contiguous = true;
  bool b_k_contiguous = false;
  // Tiles staged with 16-byte cp.async copies (rows contiguous and aligned).
  bool vector_loads = false;
  // The tensor-core kernels' block tile and pipeline depth (matmul_tiles.h: chosen per
  // architecture and shape); part of the kernel's name.
  MatmulTile tile;

  bool mma() const { return tensor_cores || tf32; }
  bool operator==(const MatmulVariant&) const = default;
};

// The kernels of one dtype combination and batch rank: the FMA kernel, rendered now, and the
// tensor-core kernels, each rendered on its first use (KernelVariants: a warm launch takes no
// lock). Copies share them; a handle kernel() returns lives as long as one copy does.
class MatmulKernel {
 public:
  MatmulKernel(DType a, DType b, DType out, int batch_rank);

  DType a_dtype() const;
  DType b_dtype() const;
  DType out_dtype() const;
  const KernelHandle& kernel(const MatmulVariant& variant) const;
  // True for the first launch of `variant` (KILN_LOG=kernels reports its schedule once).
  bool first_launch(const MatmulVariant& variant) const;

 private:
  struct Kernels;
  std::shared_ptr<Kernels> kernels_;
};

// The kernels for operands of these dtypes and batch rank, writing `out`'s dtype.
MatmulKernel render_matmul(DType a, DType b, DType out, int batch_rank);

// The variant run_matmul launches for these operands: tensor cores for f16/bf16 (both operands
// one dtype, a floating output) and, with KILN_MATMUL_TF32=1 (allow_tf32()), for f32, with the
// tile choose_matmul_tile picks for the current device; the FMA kernel otherwise.
MatmulVariant matmul_variant(const Tensor& a, const Tensor& b, DType out);

// out = a @ b for CUDA tensors of rank >= 2 (shapes already checked by the op's inference).
Tensor run_matmul(const MatmulKernel& kernel, const Tensor& a, const Tensor& b,
                  const TensorMeta& out);
// The same with the variant given (what benchmarks compare); kiln::Error, naming the shapes, if
// the operands do not fit it (dtypes, or strides and alignment for vector loads, or a tile that is
// not in the table or needs more shared memory than the device has).
Tensor run_matmul(const MatmulKernel& kernel, const Tensor& a, const Tensor& b,
                  const TensorMeta& out, const MatmulVariant& variant);

}  // namespace kiln::jit::codegen
