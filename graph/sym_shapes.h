// Size expressions through ops: given the expressions of an op's input dims (runtime/sym_int.h),
// those of its output dims. Each output dim copies an input dim, takes an entry of a target
// shape, or is a constant; a size kiln cannot follow symbolically (cat or pad along a symbolic
// dim, a partial slice of one) is opaque. Values are checked by infer_meta; this only maps dims,
// and tracing verifies both agree at a second set of sizes (jit/compiled_function.cpp).
#pragma once

#include <span>
#include <vector>

#include "runtime/op.h"

namespace kiln::graph {

using SizeExprs = std::vector<SymExpr>;

std::vector<SizeExprs> infer_size_exprs(OpId op, std::span<const SizeExprs> inputs,
                                        std::span<const TensorMeta> input_meta,
                                        const OpAttrs& attrs,
                                        std::span<const TensorMeta> outputs);

}  // namespace kiln::graph
