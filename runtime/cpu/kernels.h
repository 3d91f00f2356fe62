// The CPU reference kernels: the ground truth every generated kernel is compared against.
// Each takes validated inputs and the inferred output metadata (runtime/op.h).
#pragma once

#include <span>

#include "runtime/op.h"
#include "runtime/tensor.h"

namespace kiln::cpu {

// Copies `src` into `dst` elementwise, converting dtype; shapes must match, strides are free
// (a zero stride in `src` broadcasts).
void copy_into(const Tensor& dst, const Tensor& src);
// `x` broadcast to `shape` and converted to `dtype`, as a fresh contiguous tensor (or `x`
// itself when it already is one).
Tensor materialize(const Tensor& x, const Shape& shape, DType dtype);
// A fresh contiguous copy of `x` in `dtype`, never `x` itself.
Tensor materialize_copy(const Tensor& x, DType dtype);

// `x` with `dims` moved innermost and made contiguous in `dtype`: `outer` rows of `inner`
// elements each. `order` is the permutation applied, `shape` the permuted shape.
struct Rows {
  Tensor data;
  std::int64_t outer = 1, inner = 1;
  std::vector<std::int64_t> order;
  Shape shape;
};
Rows rows_of(const Tensor& x, const std::vector<std::int64_t>& dims, DType dtype);
// Writes rows computed in the layout of `rows` back into `out`, which has x's shape.
void scatter_rows(const Tensor& out, const Rows& rows, const Tensor& computed);

Tensor unary(OpId op, const Tensor& x, const OpAttrs& attrs, const TensorMeta& out);
Tensor binary(OpId op, const Tensor& a, const Tensor& b, const TensorMeta& out);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, const TensorMeta& out);
Tensor triangle(OpId op, const Tensor& x, std::int64_t diagonal, const TensorMeta& out);
// random_uniform, random_normal, random_int from their seed and offset (runtime/random.h).
Tensor random_draw(OpId op, std::span<const Tensor> in, const OpAttrs& attrs,
                   const TensorMeta& out);
Tensor reduce(OpId op, const Tensor& x, const OpAttrs& attrs, const TensorMeta& out);
// max_dim / min_dim: values and i64 indices of the extreme along `dim` (NaN wins, ties keep
// the first).
std::vector<Tensor> extreme_along(OpId op, const Tensor& x, std::int64_t dim,
                                  std::span<const TensorMeta> out);
// sort / topk: values and i64 indices along attrs.dim (runtime/cpu/sort.cpp).
std::vector<Tensor> sort_along(OpId op, const Tensor& x, const OpAttrs& attrs,
                               std::span<const TensorMeta> out);
Tensor cumsum(const Tensor& x, std::int64_t dim, bool reverse, const TensorMeta& out);
Tensor softmax(OpId op, const Tensor& x, std::int64_t dim, const TensorMeta& out);
Tensor matmul(const Tensor& a, const Tensor& b, const TensorMeta& out);
Tensor gather(const Tensor& x, const Tensor& index, std::int64_t dim, const TensorMeta& out);
Tensor index_select(const Tensor& x, const Tensor& index, std::int64_t dim,
                    const TensorMeta& out);
Tensor scatter_add(const Tensor& self, const Tensor& index, const Tensor& src, std::int64_t dim);
Tensor index_add(const Tensor& self, const Tensor& index, const Tensor& src, std::int64_t dim);
// self with the slices along dim at index replaced by src's; the last entry naming a slice wins.
Tensor index_copy(const Tensor& self, const Tensor& index, const Tensor& src, std::int64_t dim);
Tensor cat(std::span<const Tensor> inputs, std::int64_t dim, const TensorMeta& out);
Tensor pad(const Tensor& x, const OpAttrs& attrs, const TensorMeta& out);
// cached_attention's out (runtime/cpu/cached_attention.cpp).
Tensor cached_attention(std::span<const Tensor> in, const OpAttrs& attrs, const TensorMeta& out);
// attention: (out, lse); attention_backward: (dq, dk, dv). Inputs as runtime/ops.def lists them.
std::vector<Tensor> attention(std::span<const Tensor> in, const OpAttrs& attrs,
                              std::span<const TensorMeta> out);
std::vector<Tensor> attention_backward(std::span<const Tensor> in, const OpAttrs& attrs,
                                       std::span<const TensorMeta> out);

}  // namespace kiln::cpu
