// Scaled dot-product attention and its backward on the host: the scores materialized per batch
// entry, f32 accumulation for f16/bf16/f32 and f64 for f64. The reference the fused CUDA kernels
// are checked against (runtime/ops.def describes both ops).
#include <cmath>
#include <limits>
#include <type_traits>

#include "runtime/attention_heads.h"
#include "runtime/attention_inputs.h"
#include "runtime/cpu/kernels.h"
#include "runtime/dispatch.h"

namespace kiln::cpu {

namespace {

template <typename T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// q, k, v (and the mask) broadcast to the output's batch dims, contiguous in the accumulation
// dtype: one [T, d] / [S, d] / [S, dv] / [T, S] block per batch entry.
struct Operands {
  Shape batch;
  std::int64_t batches = 1, t = 0, s = 0, d = 0, dv = 0;
  DType acc = DType::f32;
  Tensor q, k, v, mask;
  bool bool_mask = false;
  // With dropout: per [T, S] block of the batch the factor each probability is multiplied by, 0
  // (dropped) or 1 / (1 - p), from the draw dropout would make of the probabilities.
  Tensor dropout;
};

// The dropout factors of `o`'s probabilities: uniforms of the scores' shape drawn at the op's
// seed and offset, as dropout(softmax(..)) draws them.
Tensor dropout_factors(const Operands& o, const Shape& scores, const Tensor& seed,
                       const Tensor& offset, double p) {
  OpAttrs draw;
  draw.shape = scores;
  draw.dtype = o.acc;
  draw.device = Device::cpu();
  const Tensor numbers[] = {seed, offset};  // host numbers, as every draw takes them
  Tensor u = dispatch1(OpId::random_uniform, numbers, draw);
  AttentionDropout d = attention_dropout(p, o.acc);
  Tensor z = empty(scores, o.acc);
  visit_dtype(o.acc, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      const T* pu = static_cast<const T*>(u.raw_data());
      T* pz = static_cast<T*>(z.raw_data());
      for (std::int64_t i = 0; i < numel(scores); ++i)
        pz[i] = pu[i] >= static_cast<T>(d.threshold) ? static_cast<T>(d.scale) : T(0);
    }
  });
  return z;
}

Operands operands(std::span<const Tensor> in, OpId op, const OpAttrs& attrs, const Shape& batch) {
  AttentionInputs layout = attention_inputs(op, in.size(), attrs);
  Operands o;
  o.batch = batch;
  o.batches = numel(batch);
  o.acc = in[0].dtype() == DType::f64 ? DType::f64 : DType::f32;
  o.t = in[0].shape()[in[0].dim() - 2];
  o.d = in[0].shape().back();
  o.s = in[1].shape()[in[1].dim() - 2];
  o.dv = in[2].shape().back();
  auto full = [&](std::int64_t rows, std::int64_t cols) {
    Shape s = batch;
    s.push_back(rows);
    s.push_back(cols);
    return s;
  };
  o.q = materialize(in[0], full(o.t, o.d), o.acc);
  o.k = materialize(in[1], full(o.s, o.d), o.acc);
  o.v = materialize(in[2], full(o.s, o.dv), o.acc);
  if (layout.mask) {
    const Tensor& mask = in[*layout.mask];
    o.bool_mask = mask.dtype() == DType::bool_;
    o.mask = materialize(mask, full(o.t, o.s), o.bool_mask ? DType::bool_ : o.acc);
  }
  if (layout.seed)
    o.dropout =
        dropout_factors(o, full(o.t, o.s), in[*layout.seed], in[*layout.seed + 1], attrs.dropout);
  return o;
}

// The scaled, masked scores of batch entry `b`: masked-out entries are -inf.
template <typename T>
Mat<T> scores(const Operands& o, std::int64_t b, double scale, bool causal) {
  const T* q = static_cast<const T*>(o.q.raw_data()) + b * o.t * o.d;
  const T* k = static_cast<const T*>(o.k.raw_data()) + b * o.s * o.d;
  Eigen::Map<const Mat<T>> mq(q, o.t, o.d), mk(k, o.s, o.d);
  Mat<T> s = (mq * mk.transpose()) * static_cast<T>(scale);
  constexpr T neg_inf = -std::numeric_limits<T>::infinity();
  if (o.mask.defined()) {
    std::int64_t at = b * o.t * o.s;
    if (o.bool_mask) {
      const bool* m = static_cast<const bool*>(o.mask.raw_data()) + at;
      for (std::int64_t i = 0; i < o.t * o.s; ++i)
        if (!m[i]) s.data()[i] = neg_inf;
    } else {
      const T* m = static_cast<const T*>(o.mask.raw_data()) + at;
      for (std::int64_t i = 0; i < o.t * o.s; ++i) s.data()[i] += m[i];
    }
  }
  if (causal)  // top-left aligned: row i attends keys 0..i
    for (std::int64_t i = 0; i < o.t; ++i)
      for (std::int64_t j = i + 1; j < o.s; ++j) s(i, j) = neg_inf;
  return s;
}

// Batch entry b's dropout factors, [T, S].
template <typename T>
Eigen::Map<const Mat<T>> dropout_block(const Operands& o, std::int64_t b) {
  return {static_cast<const T*>(o.dropout.raw_data()) + b * o.t * o.s, o.t, o.s};
}

// Batch shape of the output: q's, k's and v's batch dims broadcast.
Shape batch_shape(std::span<const Tensor> in) {
  auto batch_of = [](const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); };
  return broadcast_shapes(broadcast_shapes(batch_of(in[0]), batch_of(in[1]), "attention"),
                          batch_of(in[2]), "attention");
}

// `x` summed over the dims it was broadcast along to reach its shape from `shape`, in `dtype`.
Tensor sum_to_shape(const Tensor& x, const Shape& shape, DType dtype) {
  std::size_t lead = x.shape().size() - shape.size();
  OpAttrs attrs;
  attrs.keepdim = true;
  for (std::size_t i = 0; i < x.shape().size(); ++i)
    if (i < lead || (shape[i - lead] == 1 && x.shape()[i] != 1))
      attrs.dims.push_back(static_cast<std::int64_t>(i));
  if (attrs.dims.empty()) return materialize(x, shape, dtype);
  Shape kept = x.shape();
  for (auto d : attrs.dims) kept[static_cast<std::size_t>(d)] = 1;
  Tensor summed = reduce(OpId::sum, x, attrs, {kept, x.dtype()});
  OpAttrs reshape;
  reshape.shape = shape;
  Tensor view = dispatch1(OpId::reshape, {&summed, 1}, reshape);
  return materialize_copy(view, dtype);
}

std::vector<Tensor> attention_broadcast(std::span<const Tensor> in, const OpAttrs& attrs,
                                        std::span<const TensorMeta> out) {
  Operands o = operands(in, OpId::attention, attrs, batch_shape(in));
  Tensor result = empty(out[0].shape, o.acc), lse = empty(out[1].shape, o.acc);
  visit_dtype(o.acc, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      const T* v = static_cast<const T*>(o.v.raw_data());
      T* po = static_cast<T*>(result.raw_data());
      T* pl = static_cast<T*>(lse.raw_data());
      for (std::int64_t b = 0; b < o.batches; ++b) {
        Mat<T> p = scores<T>(o, b, attrs.scale, attrs.causal);
        for (std::int64_t i = 0; i < o.t; ++i) {
          T m = o.s == 0 ? -std::numeric_limits<T>::infinity() : p.row(i).maxCoeff();
          if (m == -std::numeric_limits<T>::infinity()) {  // fully masked: out 0, lse -inf
            p.row(i).setZero();
            pl[b * o.t + i] = m;
            continue;
          }
          p.row(i) = (p.row(i).array() - m).exp();
          T l = p.row(i).sum();
          p.row(i) /= l;
          pl[b * o.t + i] = m + std::log(l);
        }
        Eigen::Map<const Mat<T>> mv(v + b * o.s * o.dv, o.s, o.dv);
        if (o.dropout.defined()) p.array() *= dropout_block<T>(o, b).array();
        Eigen::Map<Mat<T>>(po + b * o.t * o.dv, o.t, o.dv).noalias() = p * mv;
      }
    } else {
      throw DTypeError(fmt::format("attention: unexpected accumulation dtype {}", o.acc));
    }
  });
  return {materialize(result, result.shape(), out[0].dtype),
          materialize(lse, lse.shape(), out[1].dtype)};
}

std::vector<Tensor> attention_backward_broadcast(std::span<const Tensor> in, const OpAttrs& attrs,
                                                 std::span<const TensorMeta> out) {
  Shape batch = batch_shape(in);
  Operands o = operands(in, OpId::attention_backward, attrs, batch);
  Shape rows = batch;
  rows.push_back(o.t);
  Shape out_shape = rows;
  out_shape.push_back(o.dv);
  Tensor lse = materialize(in[4], rows, o.acc), dout = materialize(in[5], out_shape, o.acc);
  auto full = [&](std::int64_t r, std::int64_t c) {
    Shape s = batch;
    s.push_back(r);
    s.push_back(c);
    return s;
  };
  Tensor dq = empty(full(o.t, o.d), o.acc), dk = empty(full(o.s, o.d), o.acc),
         dv = empty(full(o.s, o.dv), o.acc);
  visit_dtype(o.acc, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      const T* q = static_cast<const T*>(o.q.raw_data());
      const T* k = static_cast<const T*>(o.k.raw_data());
      const T* v = static_cast<const T*>(o.v.raw_data());
      const T* pl = static_cast<const T*>(lse.raw_data());
      const T* pdo = static_cast<const T*>(dout.raw_data());
      for (std::int64_t b = 0; b < o.batches; ++b) {
        Mat<T> p = scores<T>(o, b, attrs.scale, attrs.causal), p_dropped;
        // P from the saved log-sum-exp; a row with lse = -inf contributes nothing.
        for (std::int64_t i = 0; i < o.t; ++i) {
          T l = pl[b * o.t + i];
          if (l == -std::numeric_limits<T>::infinity())
            p.row(i).setZero();
          else
            p.row(i) = (p.row(i).array() - l).exp();
        }
        Eigen::Map<const Mat<T>> mq(q + b * o.t * o.d, o.t, o.d), mk(k + b * o.s * o.d, o.s, o.d),
            mv(v + b * o.s * o.dv, o.s, o.dv), mdo(pdo + b * o.t * o.dv, o.t, o.dv);
        Mat<T> dp = mdo * mv.transpose();
        // Dropout: out = (P ∘ Z) V, so dP is dP ∘ Z and dV reads P ∘ Z.
        if (o.dropout.defined()) {
          auto z = dropout_block<T>(o, b);
          dp.array() *= z.array();
          p_dropped = p.array() * z.array();
        }
        // dS = P ∘ (dP − rowsum(P ∘ dP)): the softmax's backward.
        Eigen::Matrix<T, Eigen::Dynamic, 1> delta = (p.array() * dp.array()).rowwise().sum();
        Mat<T> ds =
            (p.array() * (dp.colwise() - delta).array()).matrix() * static_cast<T>(attrs.scale);
        Eigen::Map<Mat<T>>(static_cast<T*>(dq.raw_data()) + b * o.t * o.d, o.t, o.d).noalias() =
            ds * mk;
        Eigen::Map<Mat<T>>(static_cast<T*>(dk.raw_data()) + b * o.s * o.d, o.s, o.d).noalias() =
            ds.transpose() * mq;
        Eigen::Map<Mat<T>>(static_cast<T*>(dv.raw_data()) + b * o.s * o.dv, o.s, o.dv).noalias() =
            (o.dropout.defined() ? p_dropped : p).transpose() * mdo;
      }
    } else {
      throw DTypeError(fmt::format("attention_backward: unexpected accumulation dtype {}", o.acc));
    }
  });
  return {sum_to_shape(dq, out[0].shape, out[0].dtype),
          sum_to_shape(dk, out[1].shape, out[1].dtype),
          sum_to_shape(dv, out[2].shape, out[2].dtype)};
}

Tensor reshaped(const Tensor& x, const Shape& shape) {
  OpAttrs attrs;
  attrs.shape = shape;
  return dispatch1(OpId::reshape, {&x, 1}, attrs);
}

// Grouped-query attention (runtime/attention_heads.h) as broadcast attention over views: q-like
// operands split [..., Hkv, g, ...], k and v given a size-1 group dim; the results merged back.
// `kv_out`: the outputs shaped like k or v; `lse_out`: the second output is the forward's lse.
struct GroupedCall {
  std::vector<Tensor> in;
  std::vector<TensorMeta> out;
};
GroupedCall grouped(std::span<const Tensor> in, std::span<const TensorMeta> out, std::int64_t group,
                    std::span<const bool> kv_out, bool lse_out) {
  GroupedCall c;
  for (std::size_t i = 0; i < in.size(); ++i) {
    bool kv = i == 1 || i == 2;
    std::size_t trailing = i == 4 && in.size() >= 6 ? 1 : 2;  // attention_backward's lse
    c.in.push_back(reshaped(in[i], kv ? grouped_kv_shape(in[i].shape(), trailing)
                                      : grouped_query_shape(in[i].shape(), group, trailing)));
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::size_t trailing = lse_out && i == 1 ? 1 : 2;
    c.out.push_back({kv_out[i] ? grouped_kv_shape(out[i].shape, trailing)
                               : grouped_query_shape(out[i].shape, group, trailing),
                     out[i].dtype});
  }
  return c;
}

}  // namespace

std::vector<Tensor> attention(std::span<const Tensor> in, const OpAttrs& attrs,
                              std::span<const TensorMeta> out) {
  std::int64_t group = attention_group(in[0].shape(), in[1].shape(), in[2].shape(), "attention");
  if (group == 1) return attention_broadcast(in, attrs, out);
  const bool kv_out[] = {false, false};
  GroupedCall c = grouped(in, out, group, kv_out, true);
  std::vector<Tensor> r = attention_broadcast(c.in, attrs, c.out);
  return {reshaped(r[0], out[0].shape), reshaped(r[1], out[1].shape)};
}

std::vector<Tensor> attention_backward(std::span<const Tensor> in, const OpAttrs& attrs,
                                       std::span<const TensorMeta> out) {
  std::int64_t group =
      attention_group(in[0].shape(), in[1].shape(), in[2].shape(), "attention_backward");
  if (group == 1) return attention_backward_broadcast(in, attrs, out);
  // dk and dv come back at k's and v's grouped shapes, already summed over each group.
  const bool kv_out[] = {false, true, true};
  GroupedCall c = grouped(in, out, group, kv_out, false);
  std::vector<Tensor> r = attention_backward_broadcast(c.in, attrs, c.out);
  return {reshaped(r[0], out[0].shape), reshaped(r[1], out[1].shape), reshaped(r[2], out[2].shape)};
}

}  // namespace kiln::cpu
