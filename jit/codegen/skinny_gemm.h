// The skinny GEMM (templates/skinny_gemm.cu): a matmul of at most kSkinnyMaxRows rows (a decode
// step's batch) against a 2-D weight is bound by reading the weight, which cuBLASLt's tiles,
// sized for many rows, do not stream at full bandwidth. A warp per output column reads that
// column's weights once, and the pointwise group after the product (bias, activation, residual,
// a dequantizing scale) runs in its epilogue, so the product is never stored. A cast of the
// weight from a graph input (an int8 weight, nn::quantize_int8) is read through: the kernel
// converts in registers, and the wide weight never exists.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "graph/fusion.h"
#include "graph/graph.h"
#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/output_buffers.h"

namespace kiln::jit::codegen {

inline constexpr std::int64_t kSkinnyMaxRows = 8;
// Weights smaller than this (elements) are not worth streaming apart: reading them is not the
// cost, and the library's path stays (KILN_SKINNY_GEMM=1 takes every size).
inline constexpr std::int64_t kSkinnyMinWeight = 16384;

struct SkinnyGemm {
  int matmul_group = -1, matmul_node = -1;
  int epilogue_group = -1;  // the pointwise group it computes, or -1: it writes the product
  // The groups it reads the weight through (the cast of a graph input and the transpose of that
  // cast): their values are never made.
  std::vector<int> prologue_groups;
  // The tensor read as the weight: the matmul's second operand [K, N], or with `transposed` the
  // graph input [N, K] a prologue casts (to the product's dtype, in registers).
  int weight_value = -1;
  bool transposed = false;
  std::int64_t rows = 0;  // M: the product's rows, its leading dims together
  // Output columns per warp: more where the grid still fills the GPU, so that a block's staging
  // of the rows serves more of the weight.
  int columns_per_warp = 1;
  std::vector<int> host_views;  // the epilogue's views of tensors it reads, run on the host
  std::vector<int> reads;       // tensors the epilogue reads, each of the product's shape
  std::vector<int> scalars;     // 0-dim CPU numbers it takes by value
  std::vector<int> writes;      // values written, contiguous
  std::vector<int> nodes;       // every node it computes (the accuracy check's)
  KernelHandle kernel;
  std::string note;  // what explain() says it is
};

// The skinny GEMM of matmul group `group` if its weight has at least `min_weight` elements, or
// nothing with `why` saying which rule failed.
std::optional<SkinnyGemm> plan_skinny_gemm(const graph::Graph& graph,
                                           const graph::Partition& partition, int group,
                                           std::int64_t min_weight, std::string& why);

// Runs it on `values` (indexed by graph value), writing its values (into `into` where given).
void run_skinny_gemm(const graph::Graph& graph, const SkinnyGemm& gemm, std::vector<Tensor>& values,
                     std::span<const std::int64_t> symbol_values, OutputBuffers into = {});

}  // namespace kiln::jit::codegen
