// The primitive ops of the public API: argument normalization, then `record` (dispatch +
// history). Composites live in composites.cpp, derivative rules in derivatives.cpp.
#include "autograd/ops.h"

#include <cmath>

#include "autograd/record.h"
#include "runtime/trace_hooks.h"

namespace kiln {

using autograd::record;

namespace {

Tensor unary(OpId op, const Tensor& x) { return record(op, {x}); }
Tensor binary(OpId op, const Tensor& a, const Tensor& b) { return record(op, {a, b}); }

// A C++ scalar as a 0-d tensor of the dtype the promotion rules give it next to `t`.
Tensor wrap_scalar(double value, const Tensor& t) {
  KILN_OP_SCOPE;
  bool integral = std::isfinite(value) && value == std::floor(value);
  return scalar_tensor(value, scalar_result_type(t.dtype(), integral));
}

}  // namespace

#define KILN_DEFINE_UNARY(name) \
  Tensor name(const Tensor& x) { return unary(OpId::name, x); }
KILN_DEFINE_UNARY(neg)
KILN_DEFINE_UNARY(abs)
KILN_DEFINE_UNARY(exp)
KILN_DEFINE_UNARY(log)
KILN_DEFINE_UNARY(log1p)
KILN_DEFINE_UNARY(expm1)
KILN_DEFINE_UNARY(sqrt)
KILN_DEFINE_UNARY(rsqrt)
KILN_DEFINE_UNARY(reciprocal)
KILN_DEFINE_UNARY(sin)
KILN_DEFINE_UNARY(cos)
KILN_DEFINE_UNARY(tanh)
KILN_DEFINE_UNARY(sigmoid)
KILN_DEFINE_UNARY(relu)
KILN_DEFINE_UNARY(silu)
KILN_DEFINE_UNARY(erf)
KILN_DEFINE_UNARY(sign)
KILN_DEFINE_UNARY(logical_not)
#undef KILN_DEFINE_UNARY

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  KILN_OP_SCOPE;
  return unary(approximate == GeluApproximation::tanh ? OpId::gelu_tanh : OpId::gelu, x);
}

Tensor cast(const Tensor& x, DType dtype) {
  KILN_OP_SCOPE;
  if (x.dtype() == dtype) return x;
  OpAttrs attrs;
  attrs.dtype = dtype;
  return record(OpId::cast, {x}, attrs);
}

#define KILN_DEFINE_BINARY(name)                                                         \
  Tensor name(const Tensor& a, const Tensor& b) { return binary(OpId::name, a, b); }     \
  Tensor name(const Tensor& a, double b) { return binary(OpId::name, a, wrap_scalar(b, a)); } \
  Tensor name(double a, const Tensor& b) { return binary(OpId::name, wrap_scalar(a, b), b); }
KILN_DEFINE_BINARY(add)
KILN_DEFINE_BINARY(sub)
KILN_DEFINE_BINARY(mul)
KILN_DEFINE_BINARY(div)
KILN_DEFINE_BINARY(pow)
KILN_DEFINE_BINARY(maximum)
KILN_DEFINE_BINARY(minimum)
KILN_DEFINE_BINARY(eq)
KILN_DEFINE_BINARY(ne)
KILN_DEFINE_BINARY(lt)
KILN_DEFINE_BINARY(le)
KILN_DEFINE_BINARY(gt)
KILN_DEFINE_BINARY(ge)
#undef KILN_DEFINE_BINARY

Tensor logical_and(const Tensor& a, const Tensor& b) { return binary(OpId::logical_and, a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return binary(OpId::logical_or, a, b); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  KILN_OP_SCOPE;
  return record(OpId::where, {cond, a, b});
}
Tensor where(const Tensor& cond, const Tensor& a, double b) {
  KILN_OP_SCOPE;
  return where(cond, a, wrap_scalar(b, a));
}
Tensor where(const Tensor& cond, double a, const Tensor& b) {
  KILN_OP_SCOPE;
  return where(cond, wrap_scalar(a, b), b);
}

// ---- reductions ----

namespace {
Tensor reduction(OpId op, const Tensor& x, const Dims& dims, bool keepdim) {
  KILN_OP_SCOPE;
  OpAttrs attrs;
  attrs.dims = dims;
  attrs.keepdim = keepdim;
  return record(op, {x}, attrs);
}
}  // namespace

Tensor sum(const Tensor& x, const Dims& dims, bool keepdim) {
  KILN_OP_SCOPE;
  return reduction(OpId::sum, x, dims, keepdim);
}
Tensor prod(const Tensor& x, const Dims& dims, bool keepdim) {
  KILN_OP_SCOPE;
  return reduction(OpId::prod, x, dims, keepdim);
}
Tensor amax(const Tensor& x, const Dims& dims, bool keepdim) {
  KILN_OP_SCOPE;
  return reduction(OpId::amax, x, dims, keepdim);
}
Tensor amin(const Tensor& x, const Dims& dims, bool keepdim) {
  KILN_OP_SCOPE;
  return reduction(OpId::amin, x, dims, keepdim);
}
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim) {
  KILN_OP_SCOPE;
  return reduction(OpId::argmax, x, {dim}, keepdim);
}
Tensor argmin(const Tensor& x, std::int64_t dim, bool keepdim) {
  KILN_OP_SCOPE;
  return reduction(OpId::argmin, x, {dim}, keepdim);
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  KILN_OP_SCOPE;
  if (x.shape() == shape) return x;
  std::size_t lead = x.shape().size() - shape.size();
  KILN_CHECK_AS(ShapeError, x.shape().size() >= shape.size(),
                "sum_to: cannot sum shape {} to the larger rank of {}", shape_str(x.shape()),
                shape_str(shape));
  Dims dims;
  for (std::size_t i = 0; i < x.shape().size(); ++i) {
    bool leading = i < lead;
    KILN_CHECK_AS(ShapeError, leading || shape[i - lead] == x.shape()[i] || shape[i - lead] == 1,
                  "sum_to: shape {} was not broadcast from {}", shape_str(x.shape()),
                  shape_str(shape));
    if (leading || (shape[i - lead] == 1 && x.shape()[i] != 1))
      dims.push_back(static_cast<std::int64_t>(i));
  }
  Tensor s = dims.empty() ? x : sum(x, dims, /*keepdim=*/true);
  return reshape(s, shape);
}

// ---- views ----

Tensor reshape(const Tensor& x, const Shape& shape) {
  KILN_OP_SCOPE;
  Shape target = infer_reshape(x.shape(), shape, "reshape");
  if (target == x.shape()) return x;
  OpAttrs attrs;
  attrs.shape = std::move(target);
  return record(OpId::reshape, {x}, attrs);
}

Tensor permute(const Tensor& x, const Dims& dims) {
  KILN_OP_SCOPE;
  OpAttrs attrs;
  attrs.dims = dims;
  return record(OpId::permute, {x}, attrs);
}

Tensor transpose(const Tensor& x, std::int64_t dim0, std::int64_t dim1) {
  KILN_OP_SCOPE;
  if (x.dim() == 0) return x;
  dim0 = normalize_dim(dim0, x.dim(), "transpose");
  dim1 = normalize_dim(dim1, x.dim(), "transpose");
  Dims perm;
  for (std::int64_t i = 0; i < x.dim(); ++i) perm.push_back(i);
  std::swap(perm[dim0], perm[dim1]);
  return permute(x, perm);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  KILN_OP_SCOPE;
  if (shape == x.shape()) return x;
  OpAttrs attrs;
  attrs.shape = shape;
  return record(OpId::expand, {x}, attrs);
}

Tensor slice(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t end,
             std::int64_t step) {
  KILN_OP_SCOPE;
  KILN_CHECK_AS(ShapeError, x.dim() > 0, "slice: cannot slice a 0-d tensor");
  dim = normalize_dim(dim, x.dim(), "slice");
  std::int64_t size = x.shape()[dim];
  auto clamp = [size](std::int64_t v) {
    if (v < 0) v += size;
    return std::clamp<std::int64_t>(v, 0, size);
  };
  OpAttrs attrs;
  attrs.dim = dim;
  attrs.start = clamp(start);
  attrs.end = std::max(attrs.start, clamp(end));
  attrs.step = step;
  return record(OpId::slice, {x}, attrs);
}

Tensor select(const Tensor& x, std::int64_t dim, std::int64_t index) {
  KILN_OP_SCOPE;
  KILN_CHECK_AS(ShapeError, x.dim() > 0, "select: cannot select from a 0-d tensor");
  dim = normalize_dim(dim, x.dim(), "select");
  std::int64_t size = x.shape()[dim];
  KILN_CHECK_AS(IndexError, index >= -size && index < size,
                "select: index {} is out of range for dim {} of size {} (shape {})", index, dim,
                size, shape_str(x.shape()));
  if (index < 0) index += size;
  return squeeze(slice(x, dim, index, index + 1), dim);
}

Tensor squeeze(const Tensor& x) {
  KILN_OP_SCOPE;
  Shape s;
  for (auto d : x.shape())
    if (d != 1) s.push_back(d);
  return reshape(x, s);
}

Tensor squeeze(const Tensor& x, std::int64_t dim) {
  KILN_OP_SCOPE;
  dim = normalize_dim(dim, x.dim(), "squeeze");
  if (x.dim() == 0 || x.shape()[dim] != 1) return x;
  Shape s = x.shape();
  s.erase(s.begin() + dim);
  return reshape(x, s);
}

Tensor unsqueeze(const Tensor& x, std::int64_t dim) {
  KILN_OP_SCOPE;
  dim = normalize_dim(dim, x.dim() + 1, "unsqueeze");
  Shape s = x.shape();
  s.insert(s.begin() + dim, 1);
  return reshape(x, s);
}

Tensor flatten(const Tensor& x, std::int64_t start_dim, std::int64_t end_dim) {
  KILN_OP_SCOPE;
  if (x.dim() == 0) return reshape(x, {1});
  start_dim = normalize_dim(start_dim, x.dim(), "flatten");
  end_dim = normalize_dim(end_dim, x.dim(), "flatten");
  KILN_CHECK_AS(IndexError, start_dim <= end_dim, "flatten: start_dim {} is after end_dim {}",
                start_dim, end_dim);
  Shape s(x.shape().begin(), x.shape().begin() + start_dim);
  std::int64_t n = 1;
  for (std::int64_t d = start_dim; d <= end_dim; ++d) n *= x.shape()[d];
  s.push_back(n);
  s.insert(s.end(), x.shape().begin() + end_dim + 1, x.shape().end());
  return reshape(x, s);
}

// ---- indexing and joining ----

namespace {
OpAttrs dim_attr(std::int64_t dim) {
  OpAttrs attrs;
  attrs.dim = dim;
  return attrs;
}
}  // namespace

Tensor gather(const Tensor& x, std::int64_t dim, const Tensor& index) {
  KILN_OP_SCOPE;
  return record(OpId::gather, {x, index}, dim_attr(dim));
}
Tensor index_select(const Tensor& x, std::int64_t dim, const Tensor& index) {
  KILN_OP_SCOPE;
  return record(OpId::index_select, {x, index}, dim_attr(dim));
}
Tensor scatter_add(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src) {
  KILN_OP_SCOPE;
  return record(OpId::scatter_add, {self, index, src}, dim_attr(dim));
}
Tensor index_add(const Tensor& self, std::int64_t dim, const Tensor& index,
                 const Tensor& source) {
  KILN_OP_SCOPE;
  return record(OpId::index_add, {self, index, source}, dim_attr(dim));
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  KILN_OP_SCOPE;
  KILN_CHECK_AS(ShapeError, weight.dim() == 2, "embedding: weight must be 2-D, got shape {}",
                shape_str(weight.shape()));
  KILN_CHECK_AS(DTypeError, is_integral(indices.dtype()),
                "embedding: indices must have dtype i64 or i32, got {}", indices.dtype());
  Tensor rows;
  try {
    rows = index_select(weight, 0, reshape(indices, {-1}));
  } catch (const IndexError& e) {
    throw IndexError(fmt::format("embedding: an index is out of range for a table of {} rows ({})",
                                 weight.shape()[0], e.what()));
  }
  Shape out = indices.shape();
  out.push_back(weight.shape()[1]);
  return reshape(rows, out);
}

Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim) {
  KILN_OP_SCOPE;
  return record(OpId::cat, tensors, dim_attr(dim));
}

Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim) {
  KILN_OP_SCOPE;
  KILN_CHECK_AS(ShapeError, !tensors.empty(), "stack: expects at least one tensor");
  for (std::size_t i = 1; i < tensors.size(); ++i)
    KILN_CHECK_AS(ShapeError, tensors[i].shape() == tensors[0].shape(),
                  "stack: tensor {} has shape {}, but tensor 0 has shape {}", i,
                  shape_str(tensors[i].shape()), shape_str(tensors[0].shape()));
  dim = normalize_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (const auto& t : tensors) parts.push_back(unsqueeze(t, dim));
  return cat(parts, dim);
}

Tensor pad(const Tensor& x, const Dims& pads, double value) {
  KILN_OP_SCOPE;
  OpAttrs attrs;
  attrs.dims = pads;
  attrs.value = value;
  return record(OpId::pad, {x}, attrs);
}

// ---- linear algebra ----

Tensor matmul(const Tensor& a, const Tensor& b) {
  KILN_OP_SCOPE;
  KILN_CHECK_AS(ShapeError, a.dim() >= 1 && b.dim() >= 1,
                "matmul: both operands need at least one dim, got shapes {} and {}",
                shape_str(a.shape()), shape_str(b.shape()));
  // Check the contraction here, so the message shows the shapes the caller passed.
  std::int64_t k_a = a.shape().back(), k_b = b.dim() == 1 ? b.shape()[0] : b.shape()[b.dim() - 2];
  KILN_CHECK_AS(ShapeError, k_a == k_b,
                "matmul: shapes {} and {} cannot be multiplied (inner dims {} and {})",
                shape_str(a.shape()), shape_str(b.shape()), k_a, k_b);
  Tensor a2 = a.dim() == 1 ? unsqueeze(a, 0) : a;
  Tensor b2 = b.dim() == 1 ? unsqueeze(b, 1) : b;
  Tensor out = record(OpId::matmul, {a2, b2});
  if (b.dim() == 1) out = squeeze(out, -1);
  if (a.dim() == 1) out = squeeze(out, b.dim() == 1 ? -1 : -2);
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  KILN_OP_SCOPE;
  KILN_CHECK_AS(ShapeError, weight.dim() == 2, "linear: weight must be 2-D, got shape {}",
                shape_str(weight.shape()));
  Tensor y = matmul(x, transpose(weight, 0, 1));
  return bias.defined() ? add(y, bias) : y;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  KILN_OP_SCOPE;
  Shape shape = broadcast_shapes(a.shape(), b.shape(), "allclose");
  auto va = expand(a.detach(), shape).to_vector<double>();
  auto vb = expand(b.detach(), shape).to_vector<double>();
  for (std::size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) || std::isnan(vb[i])) {
      if (!(equal_nan && std::isnan(va[i]) && std::isnan(vb[i]))) return false;
      continue;
    }
    if (va[i] == vb[i]) continue;
    // An infinity matches only the same infinity (the tolerance below would be infinite).
    if (std::isinf(va[i]) || std::isinf(vb[i])) return false;
    if (std::abs(va[i] - vb[i]) > atol + rtol * std::abs(vb[i])) return false;
  }
  return true;
}

}  // namespace kiln
