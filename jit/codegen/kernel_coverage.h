// What generated kernels can compute, as the fuser asks it (graph::KernelCoverage): decided from
// the CUDA expression table (cuda_expr.h), so that a node no template renders becomes a fusion
// boundary with a reason instead of an error caught while rendering.
#pragma once

#include "graph/fusion.h"

namespace kiln::jit::codegen {

// The coverage of kiln's templates; one instance, stateless.
const graph::KernelCoverage& kernel_coverage();

}  // namespace kiln::jit::codegen
