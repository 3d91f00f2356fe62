// Shape and dtype inference of the primitive ops, one rule per op class; elementwise dtypes
// follow the table's DTypeRule (runtime/ops.def).
#include <algorithm>
#include <cmath>

#include "runtime/attention_heads.h"
#include "runtime/attention_inputs.h"
#include "runtime/op.h"

namespace kiln {

namespace {

void check_arity(OpId op, std::span<const TensorMeta> in) {
  int arity = op_def(op).arity;
  if (arity < 0) {
    KILN_CHECK_AS(ShapeError, !in.empty(), "{}: expects at least one tensor", op);
    return;
  }
  KILN_CHECK(in.size() == static_cast<std::size_t>(arity), "{}: expected {} inputs, got {}", op,
             arity, in.size());
}

void check_index_dtype(OpId op, DType t) {
  KILN_CHECK_AS(DTypeError, t == DType::i64 || t == DType::i32,
                "{}: index tensor must have dtype i64 or i32, got {}", op, t);
}

std::string shapes_str(std::span<const TensorMeta> in) {
  std::vector<std::string> parts;
  for (const auto& m : in) parts.push_back(shape_str(m.shape));
  return fmt::format("{}", fmt::join(parts, " and "));
}

// Random ops: seed and offset are numbers; the output is what the attributes say.
TensorMeta infer_random(OpId op, std::span<const TensorMeta> in, const OpAttrs& attrs) {
  for (std::size_t i = 0; i < in.size(); ++i)
    KILN_CHECK_AS(DTypeError, in[i].shape.empty() && in[i].dtype == DType::i64,
                  "{}: the {} must be a 0-dim i64 tensor, got {} of shape {}", op,
                  i == 0 ? "seed" : "offset", in[i].dtype, shape_str(in[i].shape));
  for (auto s : attrs.shape)
    KILN_CHECK_AS(ShapeError, s >= 0, "{}: shape {} has a negative size", op,
                  shape_str(attrs.shape));
  if (op == OpId::random_int) {
    KILN_CHECK(attrs.low < attrs.high, "{}: low ({}) must be less than high ({})", op, attrs.low,
               attrs.high);
    KILN_CHECK_AS(DTypeError, attrs.dtype != DType::bool_, "{}: dtype bool is not supported", op);
  } else {
    KILN_CHECK_AS(DTypeError, is_floating(attrs.dtype), "{}: dtype must be floating, got {}", op,
                  attrs.dtype);
  }
  return {attrs.shape, attrs.dtype};
}

TensorMeta infer_elementwise(OpId op, std::span<const TensorMeta> in, const OpAttrs& attrs) {
  Shape shape = in[0].shape;
  for (std::size_t i = 1; i < in.size(); ++i)
    shape = broadcast_shapes(shape, in[i].shape, op_name(op));
  DType t = in[0].dtype;
  if (in.size() == 2) t = promote_types(in[0].dtype, in[1].dtype);
  switch (op_def(op).dtype_rule) {
    case DTypeRule::to_bool: return {shape, DType::bool_};
    case DTypeRule::to_floating: return {shape, is_floating(t) ? t : DType::f32};
    case DTypeRule::same:
      if (op == OpId::copy) return {shape, t};  // any dtype copies
      [[fallthrough]];
    case DTypeRule::promote:
    case DTypeRule::promote_floating:
      // tril/triu only select (bool masks are their common use, as torch.tril allows).
      KILN_CHECK_AS(DTypeError, t != DType::bool_ || op == OpId::tril || op == OpId::triu,
                    "{}: not supported for bool tensors (shapes {}); use logical_and/logical_or "
                    "or cast first",
                    op, shapes_str(in));
      if (op == OpId::tril || op == OpId::triu)
        KILN_CHECK_AS(ShapeError, shape.size() >= 2,
                      "{}: expects a tensor of rank >= 2 (a matrix or a batch of them), got {}",
                      op, shape_str(shape));
      if (op_def(op).dtype_rule == DTypeRule::promote_floating && !is_floating(t))
        t = DType::f32;  // true division
      return {shape, t};
    case DTypeRule::custom: break;
  }
  switch (op) {
    case OpId::where:
      KILN_CHECK_AS(DTypeError, in[0].dtype == DType::bool_,
                    "where: condition must have dtype bool, got {}", in[0].dtype);
      return {shape, promote_types(in[1].dtype, in[2].dtype)};
    case OpId::cast: return {shape, attrs.dtype};
    case OpId::random_uniform:
    case OpId::random_normal:
    case OpId::random_int:
      return infer_random(op, in, attrs);
    // Elementwise ops with a dtype rule of the table, and ops of other classes
    case OpId::exp:
    case OpId::log:
    case OpId::log1p:
    case OpId::expm1:
    case OpId::sqrt:
    case OpId::rsqrt:
    case OpId::reciprocal:
    case OpId::sin:
    case OpId::cos:
    case OpId::tanh:
    case OpId::sigmoid:
    case OpId::gelu:
    case OpId::gelu_tanh:
    case OpId::silu:
    case OpId::erf:
    case OpId::softplus:
    case OpId::neg:
    case OpId::abs:
    case OpId::relu:
    case OpId::sign:
    case OpId::floor:
    case OpId::ceil:
    case OpId::round:
    case OpId::trunc:
    case OpId::logical_not:
    case OpId::tril:
    case OpId::triu:
    case OpId::add:
    case OpId::sub:
    case OpId::mul:
    case OpId::div:
    case OpId::pow:
    case OpId::maximum:
    case OpId::minimum:
    case OpId::remainder:
    case OpId::floor_divide:
    case OpId::eq:
    case OpId::ne:
    case OpId::lt:
    case OpId::le:
    case OpId::gt:
    case OpId::ge:
    case OpId::logical_and:
    case OpId::logical_or:
    case OpId::copy:
    case OpId::sum:
    case OpId::prod:
    case OpId::amax:
    case OpId::amin:
    case OpId::argmax:
    case OpId::argmin:
    case OpId::max_dim:
    case OpId::min_dim:
    case OpId::cumsum:
    case OpId::softmax:
    case OpId::log_softmax:
    case OpId::sort:
    case OpId::topk:
    case OpId::cached_attention:
    case OpId::reshape:
    case OpId::permute:
    case OpId::expand:
    case OpId::slice:
    case OpId::detach:
    case OpId::gather:
    case OpId::index_select:
    case OpId::scatter_add:
    case OpId::index_add:
    case OpId::index_copy:
    case OpId::matmul:
    case OpId::cat:
    case OpId::pad:
    case OpId::to_device:
    case OpId::attention:
    case OpId::attention_backward:
      break;
  }
  throw Error(fmt::format("{}: no elementwise inference rule", op));
}

std::vector<TensorMeta> infer_reduction(OpId op, const TensorMeta& x, const OpAttrs& attrs) {
  auto rank = static_cast<std::int64_t>(x.shape.size());
  bool one_dim = op == OpId::max_dim || op == OpId::min_dim;
  std::vector<std::int64_t> given = one_dim ? std::vector<std::int64_t>{attrs.dim} : attrs.dims;
  auto dims = normalize_dims(given, rank, op_name(op));
  if (op == OpId::argmax || op == OpId::argmin)
    KILN_CHECK_AS(IndexError, attrs.dims.size() == 1, "{}: expects exactly one dim, got [{}]", op,
                  fmt::join(attrs.dims, ", "));
  if (op != OpId::sum && op != OpId::prod) {
    for (auto d : dims)
      KILN_CHECK_AS(IndexError, x.shape[d] != 0,
                    "{}: cannot reduce over dim {} of size 0 (shape {}): the op has no identity",
                    op, d, shape_str(x.shape));
  }
  Shape out = reduced_shape(x.shape, dims, attrs.keepdim);
  switch (op) {
    case OpId::argmax:
    case OpId::argmin: return {{out, DType::i64}};
    case OpId::max_dim:
    case OpId::min_dim: return {{out, x.dtype}, {out, DType::i64}};
    case OpId::sum:
    case OpId::prod: return {{out, is_floating(x.dtype) ? x.dtype : DType::i64}};
    case OpId::amax:
    case OpId::amin: return {{out, x.dtype}};
    // Not reductions
#define KILN_HANDLED_reduction
#include "runtime/op_class_cases.inc"
      break;
  }
  throw Error(fmt::format("{}: not a reduction", op));
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
      normalize_dims(attrs.dims, rank, "permute");  // rejects repeats
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
      KILN_CHECK_AS(ShapeError, rank > 0, "slice: cannot slice a 0-d tensor");
      auto d = normalize_dim(attrs.dim, rank, "slice");
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
    case OpId::detach: return x;
    // Not view ops
#define KILN_HANDLED_view
#include "runtime/op_class_cases.inc"
      break;
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
    case OpId::index_add:
    case OpId::index_copy: {
      const TensorMeta& src = in[2];
      KILN_CHECK_AS(ShapeError, index.shape.size() <= 1, "{}: index must be 1-D, got shape {}", op,
                    shape_str(index.shape));
      Shape expected = x.shape;
      if (rank > 0) expected[d] = numel(index.shape);
      KILN_CHECK_AS(ShapeError, src.shape == expected,
                    "{}: source shape {} must be {} (self {} with dim {} of size {})", op,
                    shape_str(src.shape), shape_str(expected), shape_str(x.shape), d,
                    numel(index.shape));
      KILN_CHECK_AS(DTypeError, src.dtype == x.dtype,
                    "{}: source dtype {} must equal self dtype {}", op, src.dtype, x.dtype);
      return x;
    }
    // Not index ops
#define KILN_HANDLED_index
#include "runtime/op_class_cases.inc"
    break;
  }
  throw Error(fmt::format("{}: not an index op", op));
}

TensorMeta infer_cat(std::span<const TensorMeta> in, const OpAttrs& attrs) {
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
    out[d] += p[2 * i] + p[2 * i + 1];
    // Negative amounts crop; together they may remove the whole dim but not more (also when
    // the other side pads: [-4, 2] of a size-3 dim is an error, as in PyTorch).
    std::int64_t crop =
        std::max<std::int64_t>(0, -p[2 * i]) + std::max<std::int64_t>(0, -p[2 * i + 1]);
    KILN_CHECK_AS(ShapeError, crop <= x.shape[d],
                  "pad: padding [{}] crops {} from dim {} of shape {}, which has only {}",
                  fmt::join(p, ", "), crop, d, shape_str(x.shape), x.shape[d]);
  }
  return {out, x.dtype};
}

TensorMeta infer_along_dim(OpId op, const TensorMeta& x, const OpAttrs& attrs) {
  normalize_dim(attrs.dim, static_cast<std::int64_t>(x.shape.size()), op_name(op));
  if (op == OpId::cumsum) return {x.shape, is_floating(x.dtype) ? x.dtype : DType::i64};
  return {x.shape, is_floating(x.dtype) ? x.dtype : DType::f32};  // softmax, log_softmax
}

// attention: q [..., T, d], k [..., S, d], v [..., S, dv] (batch dims broadcast; k and v may have
// fewer heads than q, grouped-query attention) and an optional
// mask broadcastable to [..., T, S]; attention_backward: q, k, v, out, lse, dout [, mask]; either
// with the dropout's seed and offset last (runtime/attention_inputs.h).
std::vector<TensorMeta> infer_attention(OpId op, std::span<const TensorMeta> in,
                                        const OpAttrs& attrs) {
  KILN_CHECK(attrs.dropout >= 0 && attrs.dropout < 1, "{}: dropout must be in [0, 1), got {}", op,
             attrs.dropout);
  AttentionInputs layout = attention_inputs(op, in.size(), attrs);
  if (layout.seed)
    for (std::size_t i : {*layout.seed, *layout.seed + 1})
      KILN_CHECK_AS(DTypeError, in[i].shape.empty() && in[i].dtype == DType::i64,
                    "{}: the dropout's seed and offset must be 0-dim i64, got {}{}", op,
                    in[i].dtype, shape_str(in[i].shape));
  const TensorMeta &q = in[0], &k = in[1], &v = in[2];
  std::string shapes = shapes_str(in.subspan(0, 3));
  for (const TensorMeta* t : {&q, &k, &v})
    KILN_CHECK_AS(ShapeError, t->shape.size() >= 2,
                  "{}: q, k and v need rank >= 2 ([..., T, d]), got shapes {}", op, shapes);
  KILN_CHECK_AS(DTypeError, is_floating(q.dtype) && k.dtype == q.dtype && v.dtype == q.dtype,
                "{}: q, k and v must share one floating dtype, got {}, {} and {} (shapes {})", op,
                q.dtype, k.dtype, v.dtype, shapes);
  std::int64_t t_len = q.shape[q.shape.size() - 2], d = q.shape.back();
  std::int64_t s_len = k.shape[k.shape.size() - 2];
  KILN_CHECK_AS(ShapeError, k.shape.back() == d,
                "{}: head dims of q and k differ ({} and {}; shapes {})", op, d, k.shape.back(),
                shapes);
  KILN_CHECK_AS(ShapeError, v.shape[v.shape.size() - 2] == s_len,
                "{}: k and v lengths differ ({} and {}; shapes {})", op, s_len,
                v.shape[v.shape.size() - 2], shapes);
  KILN_CHECK(std::isfinite(attrs.scale), "{}: scale must be finite, got {}", op, attrs.scale);
  // Grouped-query attention: k and v's heads count as q's (runtime/attention_heads.h).
  std::int64_t group = attention_group(q.shape, k.shape, v.shape, op_name(op));
  auto batch_of = [&](const Shape& s) {
    Shape b(s.begin(), s.end() - 2);
    if (group > 1 && !b.empty() && b.back() > 1) b.back() *= group;
    return b;
  };
  Shape batch = broadcast_shapes(Shape(q.shape.begin(), q.shape.end() - 2), batch_of(k.shape),
                                 op_name(op));
  batch = broadcast_shapes(batch, batch_of(v.shape), op_name(op));
  DType lse_dtype = q.dtype == DType::f64 ? DType::f64 : DType::f32;
  if (layout.mask) {
    const TensorMeta& mask = in[*layout.mask];
    KILN_CHECK_AS(DTypeError, mask.dtype == DType::bool_ || is_floating(mask.dtype),
                  "{}: mask must be bool (true attends) or floating (added to the scores), got {} "
                  "(shape {})",
                  op, mask.dtype, shape_str(mask.shape));
    Shape scores = batch;
    scores.push_back(t_len);
    scores.push_back(s_len);
    bool fits = mask.shape.size() <= scores.size();
    for (std::size_t i = 0; fits && i < mask.shape.size(); ++i) {
      std::int64_t m = mask.shape[mask.shape.size() - 1 - i];
      fits = m == 1 || m == scores[scores.size() - 1 - i];
    }
    KILN_CHECK_AS(ShapeError, fits, "{}: mask of shape {} does not broadcast to the scores' {}", op,
                  shape_str(mask.shape), shape_str(scores));
  }
  Shape lse = batch;
  lse.push_back(t_len);
  if (op == OpId::attention) {
    Shape out = lse;
    out.push_back(v.shape.back());
    return {{out, q.dtype}, {lse, lse_dtype}};
  }
  const TensorMeta &out = in[3], &lse_in = in[4], &dout = in[5];
  Shape want_out = lse;
  want_out.push_back(v.shape.back());
  KILN_CHECK_AS(ShapeError, out.shape == want_out && dout.shape == want_out && lse_in.shape == lse,
                "{}: out, lse and dout must have shapes {}, {} and {}, got {}", op,
                shape_str(want_out), shape_str(lse), shape_str(want_out),
                shapes_str(in.subspan(3, 3)));
  KILN_CHECK_AS(DTypeError, is_floating(out.dtype) && is_floating(dout.dtype) &&
                                is_floating(lse_in.dtype),
                "{}: out, lse and dout must be floating, got {}, {} and {}", op, out.dtype,
                lse_in.dtype, dout.dtype);
  return {q, k, v};
}

// cached_attention (runtime/ops.def): q [B, H, T, d] over caches [B, Hkv, S, d] and [B, Hkv, S,
// dv] with i64 lengths and starts [B]; out [B, H, T, dv] in q's dtype.
TensorMeta infer_cached_attention(std::span<const TensorMeta> in) {
  const TensorMeta &q = in[0], &k = in[1], &v = in[2], &lengths = in[3], &starts = in[4];
  constexpr std::string_view op = "cached_attention";
  KILN_CHECK_AS(ShapeError, q.shape.size() == 4 && k.shape.size() == 4 && v.shape.size() == 4,
                "{}: q, k_cache and v_cache must be [B, heads, T or S, head dim], got {}", op,
                shapes_str(in.subspan(0, 3)));
  const std::int64_t batch = q.shape[0], heads = q.shape[1], kv_heads = k.shape[1];
  KILN_CHECK_AS(ShapeError,
                k.shape[0] == batch && v.shape[0] == batch && v.shape[1] == kv_heads &&
                    v.shape[2] == k.shape[2] && k.shape[3] == q.shape[3] && kv_heads > 0 &&
                    heads % kv_heads == 0,
                "{}: q {} does not match the caches {} and {} (same B and S, the key head dim "
                "of q, kv heads dividing q's heads)",
                op, shape_str(q.shape), shape_str(k.shape), shape_str(v.shape));
  KILN_CHECK_AS(DTypeError, is_floating(q.dtype) && k.dtype == q.dtype && v.dtype == q.dtype,
                "{}: q, k_cache and v_cache must share one floating dtype, got {}, {} and {}", op,
                q.dtype, k.dtype, v.dtype);
  KILN_CHECK_AS(DTypeError, lengths.dtype == DType::i64 && starts.dtype == DType::i64,
                "{}: lengths and starts must be i64, got {} and {}", op, lengths.dtype,
                starts.dtype);
  KILN_CHECK_AS(ShapeError, lengths.shape == Shape{batch} && starts.shape == Shape{batch},
                "{}: lengths and starts must be [{}] (one per sequence), got {} and {}", op, batch,
                shape_str(lengths.shape), shape_str(starts.shape));
  return {{batch, heads, q.shape[2], v.shape[3]}, q.dtype};
}

// sort and topk: values in x's dtype and their i64 indices; topk keeps k of the dim's entries (a
// 0-dim x is one entry).
std::vector<TensorMeta> infer_sort(OpId op, const TensorMeta& x, const OpAttrs& attrs) {
  auto rank = static_cast<std::int64_t>(x.shape.size());
  std::int64_t dim = normalize_dim(attrs.dim, std::max<std::int64_t>(rank, 1), op_name(op));
  Shape out = x.shape;
  if (op == OpId::topk) {
    std::int64_t size = rank == 0 ? 1 : x.shape[dim];
    KILN_CHECK_AS(IndexError, attrs.k >= 0 && attrs.k <= size && (rank > 0 || attrs.k == 1),
                  "topk: k = {} is out of range for dim {} of size {} (shape {})", attrs.k, dim,
                  size, shape_str(x.shape));
    if (rank > 0) out[dim] = attrs.k;
  }
  return {{out, x.dtype}, {out, DType::i64}};
}

}  // namespace

std::vector<TensorMeta> infer_meta(OpId op, std::span<const TensorMeta> in,
                                   const OpAttrs& attrs) {
  check_arity(op, in);
  switch (op_class(op)) {
    case OpClass::elementwise: return {infer_elementwise(op, in, attrs)};
    case OpClass::reduction: return infer_reduction(op, in[0], attrs);
    case OpClass::scan:
    case OpClass::normalization: return {infer_along_dim(op, in[0], attrs)};
    case OpClass::view: return {infer_view(op, in[0], attrs)};
    case OpClass::index: return {infer_index(op, in, attrs)};
    case OpClass::matmul: return {infer_matmul(in[0], in[1])};
    case OpClass::movement:
      return {op == OpId::cat ? infer_cat(in, attrs) : infer_pad(in[0], attrs)};
    case OpClass::transfer: return {in[0]};
    case OpClass::attention: return infer_attention(op, in, attrs);
    case OpClass::sort:
      return infer_sort(op, in[0], attrs);
    case OpClass::cached_attention:
      return {infer_cached_attention(in)};
  }
  throw Error(fmt::format("{}: no shape inference rule", op));
}

}  // namespace kiln
