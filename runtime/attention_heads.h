// Grouped-query (and multi-query) attention in the `attention` op's semantics: k and v may have
// fewer heads (dim -3) than q, query head h reading kv head h / (H / Hkv). Every implementation
// (the host kernels, the primitive-op decomposition, the fused CUDA kernels) computes it the same
// way: q viewed [..., Hkv, g, T, d] against k and v viewed [..., Hkv, 1, S, d], so that plain
// batch broadcasting reads each kv head in place (no copy) and a kv gradient is summed over its
// group as any broadcast operand's is.
#pragma once

#include <cstdint>
#include <string_view>

#include "runtime/shape.h"

namespace kiln {

// Query heads per kv head: H / Hkv when q has H > 1 heads and k/v have Hkv > 1 heads, Hkv != H;
// otherwise 1 (the heads broadcast as batch dims do). ShapeError naming `op` and the shapes when
// Hkv does not divide H, or k and v disagree on Hkv.
std::int64_t attention_group(const Shape& q, const Shape& k, const Shape& v, std::string_view op);

// The head dim (the one before the last `trailing`) split: [..., n, X] -> [..., n/g, g, X], or
// [..., 1, 1, X] where n is 1. Shapes without a head dim are returned as they are. For q, out,
// dout, lse and the mask.
Shape grouped_query_shape(const Shape& s, std::int64_t group, std::size_t trailing);

// [..., n, X] -> [..., n, 1, X]: k and v (and their gradients) beside the grouped queries.
Shape grouped_kv_shape(const Shape& s, std::size_t trailing);

// The inverse of grouped_query_shape for a result: [..., m, g, X] -> [..., m * g, X].
Shape ungrouped_shape(const Shape& s, std::size_t trailing);

}  // namespace kiln
