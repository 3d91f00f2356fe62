// Names, classes and shape/dtype inference of the primitive ops.
#include <algorithm>

#include "runtime/op.h"

namespace kiln {

std::string_view op_name(OpId op) {
  switch (op) {
#define KILN_OP_NAME(name) \
  case OpId::name: return #name;
    KILN_ALL_OPS(KILN_OP_NAME)
#undef KILN_OP_NAME
  }
  return "invalid";
}

bool is_unary(OpId op) {
  switch (op) {
#define KILN_OP_CASE(name) case OpId::name:
    KILN_UNARY_OPS(KILN_OP_CASE)
    return true;
    default: return false;
  }
}

bool is_binary(OpId op) {
  switch (op) {
    KILN_BINARY_OPS(KILN_OP_CASE)
    return true;
    default: return false;
  }
}

OpClass op_class(OpId op) {
  switch (op) {
    KILN_UNARY_OPS(KILN_OP_CASE)
    KILN_BINARY_OPS(KILN_OP_CASE)
    case OpId::cast:
    case OpId::copy:
    case OpId::where: return OpClass::elementwise;
    KILN_REDUCTION_OPS(KILN_OP_CASE)
    return OpClass::reduction;
    KILN_VIEW_OPS(KILN_OP_CASE)
    return OpClass::view;
    case OpId::gather:
    case OpId::index_select:
    case OpId::scatter_add:
    case OpId::index_add: return OpClass::index;
    case OpId::matmul: return OpClass::matmul;
    default: return OpClass::other;
  }
}

namespace {

bool is_float_unary(OpId op) {
  switch (op) {
    KILN_UNARY_FLOAT_OPS(KILN_OP_CASE)
    return true;
    default: return false;
  }
}
#undef KILN_OP_CASE

void check_arity(OpId op, std::span<const TensorMeta> in, std::size_t n) {
  KILN_CHECK(in.size() == n, "{}: expected {} inputs, got {}", op, n, in.size());
}

void check_index_dtype(OpId op, DType t) {
  KILN_CHECK_AS(DTypeError, t == DType::i64 || t == DType::i32,
                "{}: index tensor must have dtype i64 or i32, got {}", op, t);
}

TensorMeta infer_unary(OpId op, const TensorMeta& x) {
  if (op == OpId::logical_not) return {x.shape, DType::bool_};
  if (is_float_unary(op)) return {x.shape, is_floating(x.dtype) ? x.dtype : DType::f32};
  KILN_CHECK_AS(DTypeError, x.dtype != DType::bool_, "{}: not supported for dtype bool (shape {})",
                op, shape_str(x.shape));
  return x;
}

TensorMeta infer_binary(OpId op, const TensorMeta& a, const TensorMeta& b) {
  Shape shape = broadcast_shapes(a.shape, b.shape, op_name(op));
  if (op == OpId::eq || op == OpId::ne || op == OpId::lt || op == OpId::le || op == OpId::gt ||
      op == OpId::ge || op == OpId::logical_and || op == OpId::logical_or)
    return {shape, DType::bool_};
  DType t = promote_types(a.dtype, b.dtype);
  KILN_CHECK_AS(DTypeError, t != DType::bool_,
                "{}: arithmetic on bool tensors (shapes {} and {}) is not supported; use "
                "logical_and/logical_or or cast first",
                op, shape_str(a.shape), shape_str(b.shape));
  if (op == OpId::div && !is_floating(t)) t = DType::f32;  // true division
  return {shape, t};
}

TensorMeta infer_reduction(OpId op, const TensorMeta& x, const OpAttrs& attrs) {
  auto rank = static_cast<std::int64_t>(x.shape.size());
  auto dims = normalize_dims(attrs.dims, rank, op_name(op));
  DType t = x.dtype;
  if (op == OpId::argmax || op == OpId::argmin) {
    KILN_CHECK_AS(IndexError, attrs.dims.size() == 1, "{}: expects exactly one dim, got [{}]", op,
                  fmt::join(attrs.dims, ", "));
    t = DType::i64;
  } else if (op == OpId::sum || op == OpId::prod) {
    if (!is_floating(t)) t = DType::i64;
  }
  if (op != OpId::sum && op != OpId::prod) {
    for (auto d : dims)
      KILN_CHECK_AS(IndexError, x.shape[d] != 0,
                    "{}: cannot reduce over dim {} of size 0 (shape {}): the op has no identity",
                    op, d, shape_str(x.shape));
  }
  return {reduced_shape(x.shape, dims, attrs.keepdim), t};
}

TensorMeta infer_view(OpId op, const TensorMeta& x, const OpAttrs& attrs) {
  auto rank = static_cast<std::int64_t>(x.shape.size());
  switch (op) {
    case OpId::reshape:
      KILN_CHECK_AS(ShapeError, numel(attrs.shape) == numel(x.shape),
                    "reshape: shape {} is invalid for input of shape {}", shape_str(attrs.shape),
                    shape_str(x.shape));
      return {attrs.shape, x.dtype};
    case OpId::permute: {
      KILN_CHECK_AS(ShapeError, static_cast<std::int64_t>(attrs.dims.size()) == rank,
                    "permute: {} dims given for a tensor of shape {}", attrs.dims.size(),
                    shape_str(x.shape));
      auto dims = normalize_dims(attrs.dims, rank, "permute");  // also rejects repeats
      Shape out;
      for (auto d : attrs.dims) out.push_back(x.shape[normalize_dim(d, rank, "permute")]);
      return {out, x.dtype};
    }
    case OpId::expand: {
      const Shape& target = attrs.shape;
      KILN_CHECK_AS(ShapeError, target.size() >= x.shape.size(),
                    "expand: cannot expand shape {} to fewer dims {}", shape_str(x.shape),
                    shape_str(target));
      Shape out(target.size());
      std::size_t lead = target.size() - x.shape.size();
      for (std::size_t i = 0; i < target.size(); ++i) {
        std::int64_t have = i < lead ? 1 : x.shape[i - lead];
        std::int64_t want = target[i] == -1 && i >= lead ? have : target[i];
        KILN_CHECK_AS(ShapeError, want >= 0 && (have == want || have == 1),
                      "expand: cannot expand shape {} to {} (dim {}: {} to {})",
                      shape_str(x.shape), shape_str(target), i, have, target[i]);
        out[i] = want;
      }
      return {out, x.dtype};
    }
    case OpId::slice: {
      auto d = normalize_dim(attrs.dim, rank, "slice");
      KILN_CHECK_AS(ShapeError, rank > 0, "slice: cannot slice a 0-d tensor");
      KILN_CHECK_AS(IndexError, attrs.step > 0, "slice: step must be positive, got {}",
                    attrs.step);
      KILN_CHECK_AS(IndexError,
                    attrs.start >= 0 && attrs.end <= x.shape[d] && attrs.start <= attrs.end,
                    "slice: range [{}, {}) is invalid for dim {} of shape {}", attrs.start,
                    attrs.end, d, shape_str(x.shape));
      Shape out = x.shape;
      out[d] = (attrs.end - attrs.start + attrs.step - 1) / attrs.step;
      return {out, x.dtype};
    }
    default: break;
  }
  throw Error(fmt::format("{}: not a view op", op));
}

TensorMeta infer_matmul(const TensorMeta& a, const TensorMeta& b) {
  KILN_CHECK_AS(ShapeError, a.shape.size() >= 2 && b.shape.size() >= 2,
                "matmul: primitive needs rank >= 2 operands, got {} and {}", shape_str(a.shape),
                shape_str(b.shape));
  std::int64_t m = a.shape[a.shape.size() - 2], k = a.shape.back();
  std::int64_t k2 = b.shape[b.shape.size() - 2], n = b.shape.back();
  KILN_CHECK_AS(ShapeError, k == k2,
                "matmul: shapes {} and {} cannot be multiplied (inner dims {} and {})",
                shape_str(a.shape), shape_str(b.shape), k, k2);
  Shape batch = broadcast_shapes(Shape(a.shape.begin(), a.shape.end() - 2),
                                 Shape(b.shape.begin(), b.shape.end() - 2), "matmul");
  DType t = promote_types(a.dtype, b.dtype);
  KILN_CHECK_AS(DTypeError, t != DType::bool_, "matmul: bool operands are not supported");
  batch.push_back(m);
  batch.push_back(n);
  return {batch, t};
}

TensorMeta infer_index(OpId op, std::span<const TensorMeta> in, const OpAttrs& attrs) {
  const TensorMeta& x = in[0];
  const TensorMeta& index = in[1];
  auto rank = static_cast<std::int64_t>(x.shape.size());
  auto d = normalize_dim(attrs.dim, rank, op_name(op));
  check_index_dtype(op, index.dtype);
  switch (op) {
    case OpId::gather: {
      KILN_CHECK_AS(ShapeError, index.shape.size() == x.shape.size(),
                    "gather: index shape {} must have the rank of input shape {}",
                    shape_str(index.shape), shape_str(x.shape));
      for (std::int64_t i = 0; i < rank; ++i)
        KILN_CHECK_AS(ShapeError, i == d || index.shape[i] <= x.shape[i],
                      "gather: index shape {} exceeds input shape {} at dim {}",
                      shape_str(index.shape), shape_str(x.shape), i);
      return {index.shape, x.dtype};
    }
    case OpId::index_select: {
      KILN_CHECK_AS(ShapeError, index.shape.size() <= 1,
                    "index_select: index must be 1-D, got shape {}", shape_str(index.shape));
      Shape out = x.shape;
      if (rank > 0) out[d] = numel(index.shape);
      return {out, x.dtype};
    }
    case OpId::scatter_add: {
      const TensorMeta& src = in[2];
      KILN_CHECK_AS(ShapeError,
                    index.shape.size() == x.shape.size() && src.shape.size() == x.shape.size(),
                    "scatter_add: self {}, index {} and src {} must have the same rank",
                    shape_str(x.shape), shape_str(index.shape), shape_str(src.shape));
      for (std::int64_t i = 0; i < rank; ++i)
        KILN_CHECK_AS(ShapeError,
                      index.shape[i] <= src.shape[i] && (i == d || index.shape[i] <= x.shape[i]),
                      "scatter_add: index shape {} exceeds src {} or self {} at dim {}",
                      shape_str(index.shape), shape_str(src.shape), shape_str(x.shape), i);
      KILN_CHECK_AS(DTypeError, src.dtype == x.dtype,
                    "scatter_add: src dtype {} must equal self dtype {}", src.dtype, x.dtype);
      return x;
    }
    case OpId::index_add: {
      const TensorMeta& src = in[2];
      KILN_CHECK_AS(ShapeError, index.shape.size() <= 1,
                    "index_add: index must be 1-D, got shape {}", shape_str(index.shape));
      Shape expected = x.shape;
      if (rank > 0) expected[d] = numel(index.shape);
      KILN_CHECK_AS(ShapeError, src.shape == expected,
                    "index_add: source shape {} must be {} (self {} with dim {} of size {})",
                    shape_str(src.shape), shape_str(expected), shape_str(x.shape), d,
                    numel(index.shape));
      KILN_CHECK_AS(DTypeError, src.dtype == x.dtype,
                    "index_add: source dtype {} must equal self dtype {}", src.dtype, x.dtype);
      return x;
    }
    default: break;
  }
  throw Error(fmt::format("{}: not an index op", op));
}

TensorMeta infer_cat(std::span<const TensorMeta> in, const OpAttrs& attrs) {
  KILN_CHECK_AS(ShapeError, !in.empty(), "cat: expects at least one tensor");
  const Shape& first = in[0].shape;
  KILN_CHECK_AS(ShapeError, !first.empty(), "cat: zero-dimensional tensors cannot be concatenated");
  auto d = normalize_dim(attrs.dim, static_cast<std::int64_t>(first.size()), "cat");
  Shape out = first;
  out[d] = 0;
  DType t = in[0].dtype;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const Shape& s = in[i].shape;
    bool ok = s.size() == first.size();
    for (std::size_t j = 0; ok && j < s.size(); ++j)
      ok = static_cast<std::int64_t>(j) == d || s[j] == first[j];
    KILN_CHECK_AS(ShapeError, ok,
                  "cat: tensor {} has shape {}, which does not match tensor 0's shape {} "
                  "outside dim {}",
                  i, shape_str(s), shape_str(first), d);
    out[d] += s[d];
    t = promote_types(t, in[i].dtype);
  }
  return {out, t};
}

TensorMeta infer_pad(const TensorMeta& x, const OpAttrs& attrs) {
  const auto& p = attrs.dims;
  KILN_CHECK_AS(ShapeError, p.size() % 2 == 0 && p.size() / 2 <= x.shape.size(),
                "pad: padding [{}] must hold (before, after) pairs for at most {} dims",
                fmt::join(p, ", "), x.shape.size());
  Shape out = x.shape;
  for (std::size_t i = 0; i < p.size() / 2; ++i) {
    std::size_t d = x.shape.size() - 1 - i;  // pairs start from the last dim, as in PyTorch
    KILN_CHECK_AS(ShapeError, p[2 * i] >= 0 && p[2 * i + 1] >= 0,
                  "pad: negative padding [{}] is not supported", fmt::join(p, ", "));
    out[d] += p[2 * i] + p[2 * i + 1];
  }
  return {out, x.dtype};
}

}  // namespace

std::vector<TensorMeta> infer_meta(OpId op, std::span<const TensorMeta> in,
                                   const OpAttrs& attrs) {
  if (is_unary(op)) {
    check_arity(op, in, 1);
    return {infer_unary(op, in[0])};
  }
  if (is_binary(op)) {
    check_arity(op, in, 2);
    return {infer_binary(op, in[0], in[1])};
  }
  switch (op_class(op)) {
    case OpClass::reduction: check_arity(op, in, 1); return {infer_reduction(op, in[0], attrs)};
    case OpClass::view: check_arity(op, in, 1); return {infer_view(op, in[0], attrs)};
    case OpClass::index:
      check_arity(op, in, op == OpId::gather || op == OpId::index_select ? 2 : 3);
      return {infer_index(op, in, attrs)};
    case OpClass::matmul: check_arity(op, in, 2); return {infer_matmul(in[0], in[1])};
    default: break;
  }
  switch (op) {
    case OpId::cast: check_arity(op, in, 1); return {{in[0].shape, attrs.dtype}};
    case OpId::copy: check_arity(op, in, 1); return {in[0]};
    case OpId::where: {
      check_arity(op, in, 3);
      KILN_CHECK_AS(DTypeError, in[0].dtype == DType::bool_,
                    "where: condition must have dtype bool, got {}", in[0].dtype);
      Shape s = broadcast_shapes(broadcast_shapes(in[0].shape, in[1].shape, "where"),
                                 in[2].shape, "where");
      return {{s, promote_types(in[1].dtype, in[2].dtype)}};
    }
    case OpId::cat: return {infer_cat(in, attrs)};
    case OpId::pad: check_arity(op, in, 1); return {infer_pad(in[0], attrs)};
    default: break;
  }
  throw Error(fmt::format("{}: no shape inference rule", op));
}

}  // namespace kiln
