// Per-class rules mapping input dims to output dims.
#include "graph/sym_shapes.h"

#include <algorithm>

namespace kiln::graph {

namespace {

SizeExprs constants(const Shape& shape) {
  SizeExprs out;
  for (auto d : shape) out.push_back(SymExpr::constant(d));
  return out;
}

// NumPy broadcasting: each output dim comes from an input whose dim is not 1.
SizeExprs broadcast(std::span<const SizeExprs> in, std::span<const TensorMeta> meta,
                    const Shape& out) {
  SizeExprs r = constants(out);
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 1) continue;
    std::size_t from_right = out.size() - 1 - i;
    for (std::size_t k = 0; k < in.size(); ++k) {
      const Shape& s = meta[k].shape;
      if (from_right >= s.size()) continue;
      std::size_t d = s.size() - 1 - from_right;
      if (s[d] != 1) {
        r[i] = in[k][d];
        break;
      }
    }
  }
  return r;
}

// A target shape's entries: their expressions when given, constants otherwise; for expand, an
// entry equal to a (non-1) input size follows that input dim.
SizeExprs target(const OpAttrs& attrs, const SizeExprs* input, const Shape* input_shape) {
  if (!attrs.shape_exprs.empty()) return attrs.shape_exprs;
  SizeExprs r = constants(attrs.shape);
  if (!input) return r;
  std::size_t lead = attrs.shape.size() - input_shape->size();
  for (std::size_t i = lead; i < r.size(); ++i)
    if ((*input_shape)[i - lead] != 1) r[i] = (*input)[i - lead];
  return r;
}

// What a slice to the end leaves of a dim: constant if the dim was, else opaque (the slice
// records its end as the traced size, which other sizes do not follow).
SymExpr changed(const SymExpr& before, std::int64_t after) {
  return before.is_constant() ? SymExpr::constant(after) : SymExpr::opaque();
}

SizeExprs view_sizes(OpId op, std::span<const SizeExprs> in, std::span<const TensorMeta> meta,
                     const OpAttrs& attrs, const Shape& out0) {
  auto rank = static_cast<std::int64_t>(meta[0].shape.size());
  switch (op) {
    case OpId::reshape:
      return target(attrs, nullptr, nullptr);
    case OpId::expand:
      return target(attrs, &in[0], &meta[0].shape);
    case OpId::permute: {
      SizeExprs r;
      for (auto d : attrs.dims) r.push_back(in[0][normalize_dim(d, rank, "permute")]);
      return r;
    }
    case OpId::slice: {
      SizeExprs r = in[0];
      auto d = static_cast<std::size_t>(normalize_dim(attrs.dim, rank, "slice"));
      bool whole = attrs.start == 0 && attrs.end == meta[0].shape[d] && attrs.step == 1;
      // A slice that ends before the dim does is as long at any size that still holds it
      // (the probe trace checks that); one that runs to the end follows the dim untracked.
      if (attrs.end < meta[0].shape[d])
        r[d] = SymExpr::constant(out0[d]);
      else if (!whole)
        r[d] = changed(r[d], out0[d]);
      return r;
    }
    case OpId::detach:
      return in[0];
      // Not views
#define KILN_HANDLED_view
#include "runtime/op_class_cases.inc"
      break;
  }
  throw Error(fmt::format("{}: not a view op", op));
}

SizeExprs index_sizes(OpId op, std::span<const SizeExprs> in, std::span<const TensorMeta> meta,
                      const OpAttrs& attrs) {
  switch (op) {
    case OpId::gather:
      return in[1];
    case OpId::index_select: {
      SizeExprs r = in[0];
      if (!r.empty()) {
        auto rank = static_cast<std::int64_t>(meta[0].shape.size());
        auto d = static_cast<std::size_t>(normalize_dim(attrs.dim, rank, "index_select"));
        r[d] = in[1].empty() ? SymExpr::constant(1) : in[1][0];
      }
      return r;
    }
    case OpId::scatter_add:
    case OpId::index_add:
    case OpId::index_copy:
      return in[0];
      // Not index ops
#define KILN_HANDLED_index
#include "runtime/op_class_cases.inc"
      break;
  }
  throw Error(fmt::format("{}: not an index op", op));
}

// The broadcast batch dims (all but the last two) of the first `n` operands.
SizeExprs batch_sizes(std::span<const SizeExprs> in, std::span<const TensorMeta> meta,
                      std::size_t n, const Shape& out0) {
  std::vector<TensorMeta> batch_meta;
  std::vector<SizeExprs> batch_in;
  for (std::size_t k = 0; k < n; ++k) {
    batch_meta.push_back({Shape(meta[k].shape.begin(), meta[k].shape.end() - 2), meta[k].dtype});
    batch_in.emplace_back(in[k].begin(), in[k].end() - 2);
  }
  return broadcast(batch_in, batch_meta, Shape(out0.begin(), out0.end() - 2));
}

SizeExprs movement_sizes(OpId op, std::span<const SizeExprs> in, std::span<const TensorMeta> meta,
                         const OpAttrs& attrs) {
  SizeExprs r = in[0];
  if (op == OpId::cat) {
    auto rank = static_cast<std::int64_t>(meta[0].shape.size());
    auto d = static_cast<std::size_t>(normalize_dim(attrs.dim, rank, "cat"));
    SymExpr total;
    for (const auto& e : in) total = total + e[d];
    r[d] = total;
  } else {  // pad: the amounts are constants (negative ones crop)
    for (std::size_t i = 0; i < attrs.dims.size() / 2; ++i) {
      std::size_t d = r.size() - 1 - i;
      r[d] = r[d] + SymExpr::constant(attrs.dims[2 * i] + attrs.dims[2 * i + 1]);
    }
  }
  return r;
}

}  // namespace

std::vector<SizeExprs> infer_size_exprs(OpId op, std::span<const SizeExprs> in,
                                        std::span<const TensorMeta> meta, const OpAttrs& attrs,
                                        std::span<const TensorMeta> out) {
  const Shape& out0 = out[0].shape;
  switch (op_class(op)) {
    case OpClass::elementwise:
      if (is_random(op)) return {target(attrs, nullptr, nullptr)};  // its shape is an attribute
      return {broadcast(in, meta, out0)};
    case OpClass::scan:
    case OpClass::normalization:
    case OpClass::transfer:
      return {in[0]};
    case OpClass::sort: {  // topk keeps k entries of its dim (k is a constant)
      SizeExprs r = in[0];
      if (op == OpId::topk && !r.empty())
        r[normalize_dim(attrs.dim, static_cast<std::int64_t>(r.size()), op_name(op))] =
            SymExpr::constant(attrs.k);
      return {r, r};
    }
    case OpClass::reduction: {
      auto rank = static_cast<std::int64_t>(meta[0].shape.size());
      std::vector<std::int64_t> given =
          op == OpId::max_dim || op == OpId::min_dim ? std::vector{attrs.dim} : attrs.dims;
      SizeExprs r = reduce_dims(in[0], normalize_dims(given, rank, op_name(op)), attrs.keepdim,
                                SymExpr::constant(1));
      return std::vector<SizeExprs>(out.size(), r);
    }
    case OpClass::view:
      return {view_sizes(op, in, meta, attrs, out0)};
    case OpClass::index:
      return {index_sizes(op, in, meta, attrs)};
    case OpClass::matmul: {
      SizeExprs r = batch_sizes(in, meta, 2, out0);
      r.push_back(in[0][in[0].size() - 2]);
      r.push_back(in[1].back());
      return {r};
    }
    case OpClass::attention: {
      if (op == OpId::attention_backward) return {in[0], in[1], in[2]};
      // Batch dims of q, k and v broadcast; then T of q and dv of v.
      SizeExprs lse = batch_sizes(in, meta, 3, out0);
      lse.push_back(in[0][in[0].size() - 2]);
      SizeExprs o = lse;
      o.push_back(in[2].back());
      return {o, lse};
    }
    case OpClass::movement:
      return {movement_sizes(op, in, meta, attrs)};
    case OpClass::cached_attention: {  // q's [B, H, T] and v's head dim
      SizeExprs o = in[0];
      o.back() = in[2].back();
      return {o};
    }
  }
  throw Error(fmt::format("{}: no size-expression rule", op));
}

}  // namespace kiln::graph
