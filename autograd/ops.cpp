// The primitive ops of the public API: argument normalization, then `record` (dispatch +
// history). Composites live in composites.cpp and einsum.cpp, derivative rules in
// derivatives.cpp.
#include "autograd/ops.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "autograd/autocast.h"
#include "autograd/record.h"
#include "runtime/trace_hooks.h"

namespace kiln {

using autograd::autocast_input;
using autograd::autocast_inputs;
using autograd::record;

namespace {

// The op's inputs cast as its autocast column asks (runtime/ops.def), then recorded.
Tensor unary(OpId op, const Tensor& x) {
  return record(op, {autocast_input(op, x)});
}
Tensor binary(OpId op, const Tensor& a, const Tensor& b) {
  return record(op, autocast_inputs(op, {a, b}));
}

// A C++ number as a 0-d tensor of the dtype the promotion rules give it next to `t`, on t's
// device.
Tensor wrap_scalar(Scalar value, const Tensor& t) {
  KILN_OP_SCOPE;
  Tensor s = scalar_tensor(value, scalar_result_type(t.dtype(), value.kind()));
  return t.device().is_cpu() ? s : s.to(t.device());
}

OpAttrs dim_attr(std::int64_t dim) {
  OpAttrs attrs;
  attrs.dim = dim;
  return attrs;
}

}  // namespace

// The ops with a plain `name(x)` function: the table's unary elementwise ops without attributes,
// but for gelu/gelu_tanh (one function with an approximation argument) and copy (Tensor::clone).
#define KILN_PLAIN_UNARY_OPS(X)                                                                  \
  X(neg)                                                                                      \
  X(abs) X(exp) X(log) X(log1p) X(expm1) X(sqrt) X(rsqrt) X(reciprocal) X(sin) X(cos) X(tanh) \
      X(sigmoid) X(relu) X(silu) X(erf) X(sign) X(floor) X(ceil) X(round) X(trunc) X(logical_not)
#define KILN_DEFINE_UNARY(name) \
  Tensor name(const Tensor& x) { \
    return unary(OpId::name, x); \
  }
KILN_PLAIN_UNARY_OPS(KILN_DEFINE_UNARY)
#undef KILN_DEFINE_UNARY

namespace {
// The list above against the table: a new unary op without attributes fails to build until it
// has its function here (or is listed as an exception).
constexpr bool lists_plain_unary_ops() {
#define KILN_OP_ID(name) OpId::name,
  constexpr OpId listed[] = {KILN_PLAIN_UNARY_OPS(KILN_OP_ID)};
#undef KILN_OP_ID
  for (std::size_t i = 0; i < kNumOps; ++i) {
    const OpDef& def = kOpTable[i];
    auto op = static_cast<OpId>(i);
    bool plain = def.op_class == OpClass::elementwise && def.arity == 1 &&
                 def.attrs == attr::none && op != OpId::gelu && op != OpId::gelu_tanh &&
                 op != OpId::copy;
    bool found = std::find(std::begin(listed), std::end(listed), op) != std::end(listed);
    if (plain != found) return false;
  }
  return true;
}
static_assert(lists_plain_unary_ops(),
              "KILN_PLAIN_UNARY_OPS must list every unary elementwise op without attributes");
}  // namespace
#undef KILN_PLAIN_UNARY_OPS

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  KILN_OP_SCOPE;
  return unary(approximate == GeluApproximation::tanh ? OpId::gelu_tanh : OpId::gelu, x);
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  KILN_OP_SCOPE;
  KILN_CHECK(beta != 0, "softplus: beta must be nonzero, got {} (shape {})", beta,
             shape_str(x.impl().shape));
  OpAttrs attrs;
  attrs.beta = beta;
  attrs.threshold = threshold;
  return record(OpId::softplus, {autocast_input(OpId::softplus, x)}, attrs);
}

Tensor cast(const Tensor& x, DType dtype) {
  KILN_OP_SCOPE;
  if (x.dtype() == dtype) return x;
  OpAttrs attrs;
  attrs.dtype = dtype;
  return record(OpId::cast, {x}, attrs);
}

Tensor tril(const Tensor& x, std::int64_t diagonal) {
  KILN_OP_SCOPE;
  OpAttrs attrs;
  attrs.diagonal = diagonal;
  return record(OpId::tril, {x}, attrs);
}

Tensor triu(const Tensor& x, std::int64_t diagonal) {
  KILN_OP_SCOPE;
  OpAttrs attrs;
  attrs.diagonal = diagonal;
  return record(OpId::triu, {x}, attrs);
}

#define KILN_DEFINE_BINARY(name)                                                               \
  Tensor name(const Tensor& a, const Tensor& b) {    \
    return binary(OpId::name, a, b);                 \
  }                                                  \
  Tensor name(const Tensor& a, Scalar b) {           \
    return binary(OpId::name, a, wrap_scalar(b, a)); \
  }                                                  \
  Tensor name(Scalar a, const Tensor& b) {           \
    return binary(OpId::name, wrap_scalar(a, b), b); \
  }
KILN_DEFINE_BINARY(add)
KILN_DEFINE_BINARY(sub)
KILN_DEFINE_BINARY(mul)
KILN_DEFINE_BINARY(div)
KILN_DEFINE_BINARY(pow)
KILN_DEFINE_BINARY(maximum)
KILN_DEFINE_BINARY(minimum)
KILN_DEFINE_BINARY(remainder)
KILN_DEFINE_BINARY(floor_divide)
KILN_DEFINE_BINARY(eq)
KILN_DEFINE_BINARY(ne)
KILN_DEFINE_BINARY(lt)
KILN_DEFINE_BINARY(le)
KILN_DEFINE_BINARY(gt)
KILN_DEFINE_BINARY(ge)
#undef KILN_DEFINE_BINARY

Tensor logical_and(const Tensor& a, const Tensor& b) {
  return binary(OpId::logical_and, a, b);
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  return binary(OpId::logical_or, a, b);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  KILN_OP_SCOPE;
  return record(OpId::where, {cond, a, b});
}
Tensor where(const Tensor& cond, const Tensor& a, Scalar b) {
  KILN_OP_SCOPE;
  return where(cond, a, wrap_scalar(b, a));
}
Tensor where(const Tensor& cond, Scalar a, const Tensor& b) {
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

ValuesIndices extreme_along(OpId op, const Tensor& x, std::int64_t dim, bool keepdim) {
  KILN_OP_SCOPE;
  OpAttrs attrs = dim_attr(normalize_dim(dim, x.dim(), op_name(op)));
  attrs.keepdim = keepdim;
  auto outputs = autograd::record_outputs(op, {x}, attrs);
  return {outputs[0], outputs[1]};
}
}  // namespace

Tensor sum(const Tensor& x, const Dims& dims, bool keepdim) {
  return reduction(OpId::sum, autocast_input(OpId::sum, x), dims, keepdim);
}
Tensor prod(const Tensor& x, const Dims& dims, bool keepdim) {
  return reduction(OpId::prod, autocast_input(OpId::prod, x), dims, keepdim);
}
Tensor amax(const Tensor& x, const Dims& dims, bool keepdim) {
  return reduction(OpId::amax, x, dims, keepdim);
}
Tensor amin(const Tensor& x, const Dims& dims, bool keepdim) {
  return reduction(OpId::amin, x, dims, keepdim);
}
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim) {
  return reduction(OpId::argmax, x, {dim}, keepdim);
}
Tensor argmin(const Tensor& x, std::int64_t dim, bool keepdim) {
  return reduction(OpId::argmin, x, {dim}, keepdim);
}
ValuesIndices max(const Tensor& x, std::int64_t dim, bool keepdim) {
  return extreme_along(OpId::max_dim, x, dim, keepdim);
}
ValuesIndices min(const Tensor& x, std::int64_t dim, bool keepdim) {
  return extreme_along(OpId::min_dim, x, dim, keepdim);
}

ValuesIndices sort(const Tensor& x, std::int64_t dim, bool descending) {
  KILN_OP_SCOPE;
  OpAttrs attrs = dim_attr(normalize_dim(dim, std::max<std::int64_t>(x.dim(), 1), "sort"));
  attrs.descending = descending;
  auto outputs = autograd::record_outputs(OpId::sort, {x}, attrs);
  return {outputs[0], outputs[1]};
}
Tensor argsort(const Tensor& x, std::int64_t dim, bool descending) {
  return sort(x, dim, descending).indices;
}
ValuesIndices topk(const Tensor& x, std::int64_t k, std::int64_t dim, bool largest) {
  KILN_OP_SCOPE;
  OpAttrs attrs = dim_attr(normalize_dim(dim, std::max<std::int64_t>(x.dim(), 1), "topk"));
  attrs.k = k;
  attrs.descending = largest;
  auto outputs = autograd::record_outputs(OpId::topk, {x}, attrs);
  return {outputs[0], outputs[1]};
}

Tensor cumsum(const Tensor& x, std::int64_t dim, bool reverse) {
  KILN_OP_SCOPE;
  OpAttrs attrs = dim_attr(normalize_dim(dim, x.dim(), "cumsum"));
  attrs.reverse = reverse;
  return record(OpId::cumsum, {autocast_input(OpId::cumsum, x)}, attrs);
}

Tensor softmax(const Tensor& x, std::int64_t dim) {
  KILN_OP_SCOPE;
  return record(OpId::softmax, {autocast_input(OpId::softmax, x)},
                dim_attr(normalize_dim(dim, x.dim(), "softmax")));
}

Tensor log_softmax(const Tensor& x, std::int64_t dim) {
  KILN_OP_SCOPE;
  return record(OpId::log_softmax, {autocast_input(OpId::log_softmax, x)},
                dim_attr(normalize_dim(dim, x.dim(), "log_softmax")));
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  KILN_OP_SCOPE;
  const Shape& have = x.shape();
  if (have == shape) return x;
  KILN_CHECK_AS(ShapeError, have.size() >= shape.size(),
                "sum_to: cannot sum shape {} to the larger rank of {}", shape_str(have),
                shape_str(shape));
  std::size_t lead = have.size() - shape.size();
  Dims dims;
  for (std::size_t i = 0; i < have.size(); ++i) {
    bool leading = i < lead;
    KILN_CHECK_AS(ShapeError, leading || shape[i - lead] == have[i] || shape[i - lead] == 1,
                  "sum_to: shape {} was not broadcast from {}", shape_str(have), shape_str(shape));
    if (leading || (shape[i - lead] == 1 && have[i] != 1))
      dims.push_back(static_cast<std::int64_t>(i));
  }
  Tensor s = dims.empty() ? x : sum(x, dims, /*keepdim=*/true);
  // The kept dims follow x's (possibly symbolic) sizes; the summed ones are 1.
  SymShape target;
  for (std::size_t i = lead; i < have.size(); ++i)
    target.push_back(shape[i - lead] == 1 ? SymInt(1) : x.size(static_cast<std::int64_t>(i)));
  return reshape(s, target);
}

// ---- views ----

namespace {

// Resolves a -1 in `target` so that it holds the elements of `shape` (whose element count is
// `total`, possibly symbolic): -1 becomes total / (the other sizes), which stays symbolic.
SymShape resolve_target(const SymShape& target, const Shape& shape, const SymInt& total,
                        const char* op) {
  Shape values = infer_reshape(shape, target.traced_values(), op);  // checks and messages
  SymShape out = target;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (target[i].traced_value() != -1) continue;
    SymInt known = 1;
    for (std::size_t j = 0; j < out.size(); ++j)
      if (j != i) known *= target[j];
    out[i] = known.traced_value() == 0 ? SymInt(values[i]) : total / known;
  }
  return out;
}

SymInt element_count(const Tensor& x) {
  SymInt n = 1;
  for (std::int64_t d = 0; d < x.dim(); ++d) n *= x.size(d);
  return n;
}

OpAttrs shape_attrs(const SymShape& shape) {
  OpAttrs attrs;
  attrs.shape = shape.traced_values();
  attrs.shape_exprs = shape.exprs();
  return attrs;
}

}  // namespace

Tensor reshape(const Tensor& x, const SymShape& shape) {
  KILN_OP_SCOPE;
  SymShape target = resolve_target(shape, x.impl().shape, element_count(x), "reshape");
  OpAttrs attrs = shape_attrs(target);
  if (attrs.shape == x.impl().shape && attrs.shape_exprs == x.sym_shape().exprs()) return x;
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

Tensor expand(const Tensor& x, const SymShape& shape) {
  KILN_OP_SCOPE;
  // -1 keeps the input's size; spell it out so that symbolic sizes stay visible.
  SymShape target = shape;
  std::size_t lead = target.size() >= static_cast<std::size_t>(x.dim())
                         ? target.size() - static_cast<std::size_t>(x.dim())
                         : 0;
  for (std::size_t i = lead; i < target.size(); ++i)
    if (target[i].traced_value() == -1) target[i] = x.size(static_cast<std::int64_t>(i - lead));
  OpAttrs attrs = shape_attrs(target);
  if (attrs.shape == x.impl().shape && attrs.shape_exprs == x.sym_shape().exprs()) return x;
  return record(OpId::expand, {x}, attrs);
}

Tensor slice(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t end,
             std::int64_t step) {
  KILN_OP_SCOPE;
  KILN_CHECK_AS(ShapeError, x.dim() > 0, "slice: cannot slice a 0-d tensor");
  dim = normalize_dim(dim, x.dim(), "slice");
  std::int64_t size = x.impl().shape[dim];
  auto clamp_index = [size](std::int64_t v) {
    if (v < 0) v += size;
    return std::clamp<std::int64_t>(v, 0, size);
  };
  OpAttrs attrs = dim_attr(dim);
  attrs.start = clamp_index(start);
  attrs.end = std::max(attrs.start, clamp_index(end));
  attrs.step = step;
  return record(OpId::slice, {x}, attrs);
}

Tensor select(const Tensor& x, std::int64_t dim, std::int64_t index) {
  KILN_OP_SCOPE;
  KILN_CHECK_AS(ShapeError, x.dim() > 0, "select: cannot select from a 0-d tensor");
  dim = normalize_dim(dim, x.dim(), "select");
  std::int64_t size = x.impl().shape[dim];
  KILN_CHECK_AS(IndexError, index >= -size && index < size,
                "select: index {} is out of range for dim {} of size {} (shape {})", index, dim,
                size, shape_str(x.impl().shape));
  if (index < 0) index += size;
  return squeeze(slice(x, dim, index, index + 1), dim);
}

Tensor squeeze(const Tensor& x) {
  KILN_OP_SCOPE;
  SymShape s;
  for (std::int64_t d = 0; d < x.dim(); ++d)
    if (x.impl().shape[d] != 1) s.push_back(x.size(d));
  return reshape(x, s);
}

Tensor squeeze(const Tensor& x, std::int64_t dim) {
  KILN_OP_SCOPE;
  dim = normalize_dim(dim, x.dim(), "squeeze");
  if (x.dim() == 0 || x.impl().shape[dim] != 1) return x;
  SymShape s = x.sym_shape();
  s.erase(s.begin() + dim);
  return reshape(x, s);
}

Tensor unsqueeze(const Tensor& x, std::int64_t dim) {
  KILN_OP_SCOPE;
  dim = normalize_dim(dim, x.dim() + 1, "unsqueeze");
  SymShape s = x.sym_shape();
  s.insert(s.begin() + dim, SymInt(1));
  return reshape(x, s);
}

Tensor flatten(const Tensor& x, std::int64_t start_dim, std::int64_t end_dim) {
  KILN_OP_SCOPE;
  if (x.dim() == 0) return reshape(x, {1});
  start_dim = normalize_dim(start_dim, x.dim(), "flatten");
  end_dim = normalize_dim(end_dim, x.dim(), "flatten");
  KILN_CHECK_AS(IndexError, start_dim <= end_dim, "flatten: start_dim {} is after end_dim {}",
                start_dim, end_dim);
  SymShape all = x.sym_shape();
  SymShape s(all.begin(), all.begin() + start_dim);
  SymInt n = 1;
  for (std::int64_t d = start_dim; d <= end_dim; ++d) n *= all[d];
  s.push_back(n);
  s.insert(s.end(), all.begin() + end_dim + 1, all.end());
  return reshape(x, s);
}

Tensor unflatten(const Tensor& x, std::int64_t dim, const SymShape& sizes) {
  KILN_OP_SCOPE;
  dim = normalize_dim(dim, x.dim(), "unflatten");
  KILN_CHECK_AS(ShapeError, !sizes.empty(), "unflatten: sizes must not be empty");
  SymShape split = resolve_target(sizes, {x.impl().shape[dim]}, x.size(dim), "unflatten");
  SymShape all = x.sym_shape();
  SymShape s(all.begin(), all.begin() + dim);
  s.insert(s.end(), split.begin(), split.end());
  s.insert(s.end(), all.begin() + dim + 1, all.end());
  return reshape(x, s);
}

// ---- indexing and joining ----

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
  auto operands = autocast_inputs(OpId::scatter_add, {self, src});
  return record(OpId::scatter_add, {operands[0], index, operands[1]}, dim_attr(dim));
}
Tensor index_add(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& source) {
  KILN_OP_SCOPE;
  return record(OpId::index_add, {self, index, source}, dim_attr(dim));
}

std::int64_t check_index_copy(const Tensor& self, std::int64_t dim, const Tensor& index,
                              const Tensor& source) {
  KILN_CHECK_AS(ShapeError, self.dim() > 0, "index_copy: self must have a dim, got shape {}",
                shape_str(self.impl().shape));
  std::int64_t d = normalize_dim(dim, self.dim(), "index_copy");
  KILN_CHECK_AS(DTypeError, is_integral(index.dtype()) && index.dim() == 1,
                "index_copy: index must be a 1-D integer tensor, got {} of shape {}", index.dtype(),
                shape_str(index.impl().shape));
  KILN_CHECK_AS(DTypeError, source.dtype() == self.dtype(),
                "index_copy: source ({}) must have self's dtype ({})", source.dtype(),
                self.dtype());
  Shape want = self.impl().shape;
  want[d] = index.impl().shape[0];
  KILN_CHECK_AS(ShapeError, source.impl().shape == want,
                "index_copy: source of shape {} does not fit index of {} entries along dim {} of "
                "self of shape {} (want {})",
                shape_str(source.impl().shape), index.impl().shape[0], d,
                shape_str(self.impl().shape), shape_str(want));
  return d;
}

Tensor index_copy(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& source) {
  KILN_OP_SCOPE;
  const std::int64_t d = check_index_copy(self, dim, index, source);
  return record(OpId::index_copy, {self, index, source}, dim_attr(d));
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  KILN_OP_SCOPE;
  KILN_CHECK_AS(ShapeError, weight.dim() == 2, "embedding: weight must be 2-D, got shape {}",
                shape_str(weight.impl().shape));
  KILN_CHECK_AS(DTypeError, is_integral(indices.dtype()),
                "embedding: indices must have dtype i64 or i32, got {}", indices.dtype());
  Tensor rows;
  try {
    rows = index_select(weight, 0, reshape(indices, {-1}));
  } catch (const IndexError& e) {
    throw IndexError(fmt::format("embedding: an index is out of range for a table of {} rows ({})",
                                 weight.impl().shape[0], e.what()));
  }
  SymShape out = indices.sym_shape();
  out.push_back(weight.size(1));
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
    KILN_CHECK_AS(ShapeError, tensors[i].impl().shape == tensors[0].impl().shape,
                  "stack: tensor {} has shape {}, but tensor 0 has shape {}", i,
                  shape_str(tensors[i].impl().shape), shape_str(tensors[0].impl().shape));
  dim = normalize_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (const auto& t : tensors) parts.push_back(unsqueeze(t, dim));
  return cat(parts, dim);
}

Tensor pad(const Tensor& x, const Dims& pads, double value) {
  KILN_OP_SCOPE;
  // Converting NaN, inf or an out-of-range value to an integer is undefined (PyTorch rejects it).
  double limit = x.dtype() == DType::i32 ? 0x1p31 : 0x1p63;
  KILN_CHECK(!is_integral(x.dtype()) || (value > -limit - 1 && value < limit),
             "pad: value {} does not fit the {} tensor of shape {}", value, x.dtype(),
             shape_str(x.impl().shape));
  OpAttrs attrs;
  attrs.dims = pads;
  attrs.value = value;
  return record(OpId::pad, {x}, attrs);
}

// ---- linear algebra ----

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  KILN_OP_SCOPE;
  const Tensor a = autocast_input(OpId::matmul, a_in);
  const Tensor b = autocast_input(OpId::matmul, b_in);
  KILN_CHECK_AS(ShapeError, a.dim() >= 1 && b.dim() >= 1,
                "matmul: both operands need at least one dim, got shapes {} and {}",
                shape_str(a.impl().shape), shape_str(b.impl().shape));
  // Check the contraction here, so the message shows the shapes the caller passed.
  const Shape &sa = a.impl().shape, &sb = b.impl().shape;
  std::int64_t k_a = sa.back(), k_b = b.dim() == 1 ? sb[0] : sb[sb.size() - 2];
  KILN_CHECK_AS(ShapeError, k_a == k_b,
                "matmul: shapes {} and {} cannot be multiplied (inner dims {} and {})",
                shape_str(sa), shape_str(sb), k_a, k_b);
  Tensor a2 = a.dim() == 1 ? unsqueeze(a, 0) : a;
  Tensor b2 = b.dim() == 1 ? unsqueeze(b, 1) : b;
  Tensor out = record(OpId::matmul, {a2, b2});
  if (b.dim() == 1) out = squeeze(out, -1);
  if (a.dim() == 1) out = squeeze(out, b.dim() == 1 ? -1 : -2);
  return out;
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  KILN_OP_SCOPE;
  const Shape &sa = a.impl().shape, &sb = b.impl().shape;
  KILN_CHECK_AS(ShapeError, a.dim() == 3 && b.dim() == 3 && sa[0] == sb[0] && sa[2] == sb[1],
                "bmm: expects [B, n, m] and [B, m, p] with the same B, got {} and {}",
                shape_str(sa), shape_str(sb));
  KILN_CHECK_AS(DTypeError, a.dtype() != DType::bool_ && b.dtype() != DType::bool_,
                "bmm: bool operands are not supported, got {} and {} (shapes {} and {})", a.dtype(),
                b.dtype(), shape_str(sa), shape_str(sb));
  return record(OpId::matmul, autocast_inputs(OpId::matmul, {a, b}));
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
