// The FlashAttention kernels as variants (jit/codegen/attention.h launches them): what a kernel
// is specialized for, its name and source rendered from templates/attention_*.cu with the tiles
// of attention_tiling.h, and the lookup that resolves each variant once per process.
#pragma once

#include <cstdint>
#include <optional>

#include "jit/codegen/attention_tiling.h"
#include "jit/codegen/kernel_cache.h"
#include "runtime/dtype.h"

namespace kiln::jit::codegen::attention_kernels {

struct Variant {
  DType dtype;
  int head_qk, head_v;
  std::optional<DType> mask;
  bool vector_loads;
  int batch_rank;
  bool tf32 = false;  // f32 products on tensor cores (KILN_MATMUL_TF32=1)
  // The backward's dk/dv blocks sum a group of query heads (grouped or multi-query calls).
  bool grouped = false;
  // The shared memory a block may have on the device (attention_tiling.h): picks the tiles.
  std::int64_t budget = attention_tiles::kDefaultShared;
  // Probabilities dropped in registers from Philox at (seed, offset), kernel arguments.
  bool dropout = false;
};

// The shared memory one block may have on the current device once its function opts in (the
// kernels' tiles live in dynamic shared memory, which KernelHandle::launch opts in to).
std::int64_t device_shared_budget();

// A variant's kernel and the tiles it was rendered with (what its launch sizes).
struct Launchable {
  const KernelHandle* handle;
  attention_tiles::Tiling tiling;
};

// The kernel of this kind and variant, rendered when first asked for (KILN_LOG=kernels prints its
// tiles then) and resolved at its first launch.
Launchable kernel_for(attention_tiles::Kernel kind, const Variant& v);

}  // namespace kiln::jit::codegen::attention_kernels
