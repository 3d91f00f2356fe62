// The primitive ops every backend implements, their attributes, and their shape/dtype
// inference. Composites (softmax, layer_norm, ...) are written with these in autograd/.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/shape.h"

namespace kiln {

// Unary elementwise ops. The "float" ones compute in floating point: an integer or bool input
// yields f32, as in PyTorch.
#define KILN_UNARY_FLOAT_OPS(X) \
  X(exp) X(log) X(log1p) X(expm1) X(sqrt) X(rsqrt) X(reciprocal) X(sin) X(cos) X(tanh) \
  X(sigmoid) X(gelu) X(gelu_tanh) X(silu) X(erf)
#define KILN_UNARY_OPS(X) KILN_UNARY_FLOAT_OPS(X) X(neg) X(abs) X(relu) X(sign) X(logical_not)
#define KILN_BINARY_ARITH_OPS(X) X(add) X(sub) X(mul) X(div) X(pow) X(maximum) X(minimum)
#define KILN_BINARY_COMPARE_OPS(X) X(eq) X(ne) X(lt) X(le) X(gt) X(ge)
#define KILN_BINARY_LOGICAL_OPS(X) X(logical_and) X(logical_or)
#define KILN_BINARY_OPS(X) \
  KILN_BINARY_ARITH_OPS(X) KILN_BINARY_COMPARE_OPS(X) KILN_BINARY_LOGICAL_OPS(X)
#define KILN_REDUCTION_OPS(X) X(sum) X(prod) X(amax) X(amin) X(argmax) X(argmin)
#define KILN_VIEW_OPS(X) X(reshape) X(permute) X(expand) X(slice)
#define KILN_OTHER_OPS(X) \
  X(cast) X(copy) X(where) X(matmul) X(gather) X(index_select) X(scatter_add) X(index_add) \
  X(cat) X(pad)
#define KILN_ALL_OPS(X) \
  KILN_UNARY_OPS(X) KILN_BINARY_OPS(X) KILN_REDUCTION_OPS(X) KILN_VIEW_OPS(X) KILN_OTHER_OPS(X)

enum class OpId {
#define KILN_OP_ENUM(name) name,
  KILN_ALL_OPS(KILN_OP_ENUM)
#undef KILN_OP_ENUM
};

enum class OpClass { elementwise, reduction, view, index, matmul, other };

std::string_view op_name(OpId op);
OpClass op_class(OpId op);
bool is_unary(OpId op);
bool is_binary(OpId op);

// Attributes of an op call; each op reads the fields its comment names.
struct OpAttrs {
  std::vector<std::int64_t> dims;  // reductions: dims; permute: permutation; pad: (lo, hi) pairs
  Shape shape;                     // reshape, expand: target shape
  bool keepdim = false;            // reductions
  std::int64_t dim = 0;            // slice, gather, index_select, scatter_add, index_add, cat
  std::int64_t start = 0, end = 0, step = 1;  // slice (already clamped)
  double value = 0.0;                          // pad: fill value
  DType dtype = DType::f32;                    // cast: target dtype
};

struct TensorMeta {
  Shape shape;
  DType dtype;
};

// Validates the inputs of `op` and returns the shape and dtype of each output. Errors name the
// op and the offending shapes, dtypes or values. Shared by every backend and by tracing.
std::vector<TensorMeta> infer_meta(OpId op, std::span<const TensorMeta> inputs,
                                   const OpAttrs& attrs);

}  // namespace kiln

template <>
struct fmt::formatter<kiln::OpId> : fmt::formatter<std::string_view> {
  auto format(kiln::OpId op, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(kiln::op_name(op), ctx);
  }
};
