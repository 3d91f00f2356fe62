// How each reduction op accumulates in generated code: the register type it accumulates in, its
// identity, and the CUDA lambda that combines two partial results (what a thread, a warp
// shuffle and a block tree all apply). One place, so every schedule reduces the same way.
#pragma once

#include <string>

#include "runtime/dtype.h"
#include "runtime/op.h"

namespace kiln::jit::codegen {

// argmax / argmin / max_dim / min_dim: a value and its index are reduced together.
bool is_arg_reduction(OpId op);

// The register type reductions of `op` accumulate in, for an output (or, for arg reductions,
// input) dtype `t`.
DType accumulator_dtype(OpId op, DType t);

struct ReductionCombine {
  std::string init;     // the identity, a CUDA expression of the accumulator type
  std::string combine;  // a CUDA lambda: (p, q) -> p op q, or for arg reductions
                        // (p, ip, q, iq) -> whether (p, ip) wins
};
// For sum, prod, amax/amin and the arg reductions, accumulating in `accumulator`.
ReductionCombine reduction_combine(OpId op, DType accumulator);

}  // namespace kiln::jit::codegen
