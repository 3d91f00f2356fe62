// scaled_dot_product_attention (the `attention` op) and its decomposition into primitive ops
// (see attention.h).
#include "autograd/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/ops.h"
#include "autograd/record.h"
#include "runtime/attention_heads.h"
#include "runtime/attention_inputs.h"
#include "runtime/dispatch.h"
#include "runtime/random.h"
#include "runtime/trace_hooks.h"

namespace kiln {

namespace {

// A dim of a tensor: where a size of the scores comes from.
struct DimOf {
  const Tensor& tensor;
  std::int64_t dim;
};

// While tracing, the expressions of the sizes of `full` (the scores [batch.., T, S]): T and S
// from the dims given, each batch dim from the first of `batch` whose dim there (right-aligned,
// past its last two) has that size (not 1); so a draw at dynamic sizes advances its generator by
// each call's count. Empty when not tracing or all are constants.
std::vector<SymExpr> scores_size_exprs(std::initializer_list<const Tensor*> batch, DimOf t, DimOf s,
                                       const Shape& full) {
  std::vector<SymExpr> exprs;
  if (!active_interceptor()) return exprs;
  auto rank = static_cast<std::int64_t>(full.size());
  for (std::int64_t i = 0; i + 2 < rank; ++i) {
    SymExpr e = SymExpr::constant(full[i]);
    for (const Tensor* x : batch) {
      std::int64_t d = x->dim() - (rank - i);
      if (full[i] == 1 || d < 0 || x->impl().shape[d] != full[i]) continue;
      e = traced_size_expr(x->impl(), d);
      break;
    }
    exprs.push_back(e);
  }
  exprs.push_back(traced_size_expr(t.tensor.impl(), t.dim));
  exprs.push_back(traced_size_expr(s.tensor.impl(), s.dim));
  bool symbolic =
      std::any_of(exprs.begin(), exprs.end(), [](const SymExpr& e) { return !e.is_constant(); });
  if (!symbolic) exprs.clear();
  return exprs;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask, bool causal, std::optional<double> scale,
                                    double dropout_p, Generator* gen) {
  KILN_OP_SCOPE;
  KILN_CHECK_AS(ShapeError, q.defined() && q.dim() >= 1,
                "scaled_dot_product_attention: q needs rank >= 2 ([..., T, d])");
  KILN_CHECK(dropout_p >= 0 && dropout_p <= 1,
             "scaled_dot_product_attention: dropout_p must be in [0, 1], got {}", dropout_p);
  OpAttrs attrs;
  std::int64_t d = q.impl().shape.back();
  attrs.scale = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(d > 0 ? d : 1));
  attrs.causal = causal;
  std::vector<Tensor> inputs{q, k, v};
  if (mask.defined()) inputs.push_back(mask);
  if (dropout_p == 1.0) {  // every probability dropped, as dropout(p = 1) does
    Tensor out = autograd::record_outputs(OpId::attention, std::move(inputs), attrs)[0];
    return out * 0;
  }
  if (dropout_p > 0) {
    // The draw dropout would make of the [..., T, S] probabilities (shape checks first, so that a
    // refused call leaves the generator alone).
    std::vector<TensorMeta> meta;
    for (const auto& t : inputs) meta.push_back({t.impl().shape, t.dtype()});
    attrs.dropout = dropout_p;
    meta.push_back({{}, DType::i64});
    meta.push_back({{}, DType::i64});
    Shape scores = infer_meta(OpId::attention, meta, attrs)[1].shape;
    scores.push_back(k.impl().shape[k.dim() - 2]);
    OpAttrs draw;
    draw.shape = scores;
    draw.shape_exprs = scores_size_exprs({&q, &k, &v}, {q, q.dim() - 2}, {k, k.dim() - 2}, scores);
    draw.dtype = q.dtype() == DType::f64 ? DType::f64 : DType::f32;
    draw.device = q.device();
    for (const Tensor& n : draw_inputs(OpId::random_uniform, draw, gen)) inputs.push_back(n);
  }
  return autograd::record_outputs(OpId::attention, std::move(inputs), attrs)[0];
}

namespace autograd {

Tensor device_counts(std::int64_t n, std::int64_t dim, std::int64_t rank, DType dtype,
                     Device device) {
  Shape shape(static_cast<std::size_t>(rank), 1);
  shape[static_cast<std::size_t>(dim)] = n;
  Tensor one = scalar_tensor(1, dtype);
  return cumsum(zeros(shape, dtype, device) + one, dim) - one;
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

DType accumulation_dtype(const Tensor& q) {
  return q.dtype() == DType::f64 ? DType::f64 : DType::f32;
}

// A number next to tensors of any device: a 0-d host tensor, passed to kernels by value (a
// C++ number would be copied to the device first).
Tensor number(double x, DType dtype) {
  return scalar_tensor(x, dtype);
}

// The scaled scores with the mask and the causal triangle applied (masked entries -inf), in the
// accumulation dtype.
Tensor masked_scores(const Tensor& qa, const Tensor& ka, const Tensor& mask, double scale,
                     bool causal) {
  DType acc = qa.dtype();
  Tensor s = matmul(qa, transpose(ka, -2, -1)) * number(scale, acc);
  if (mask.defined())
    s = mask.dtype() == DType::bool_ ? where(mask, s, number(-kInf, acc)) : s + cast(mask, acc);
  if (causal) {
    // Key j <= query i, from counts made on the scores' device (no host copy).
    std::int64_t t = s.impl().shape[s.dim() - 2], n = s.impl().shape.back();
    Tensor rows = device_counts(t, 0, 2, acc, s.device());
    Tensor cols = device_counts(n, 1, 2, acc, s.device());
    s = where(le(cols, rows), s, number(-kInf, acc));
  }
  return s;
}

// Softmax over the last dim that gives 0 (not NaN) on a row of -inf, and the row's natural
// log-sum-exp (-inf there).
struct Probabilities {
  Tensor p, lse;
};
Probabilities probabilities(const Tensor& s) {
  DType acc = s.dtype();
  Tensor m = amax(s, {-1}, true);
  Tensor m_safe = where(eq(m, number(-kInf, acc)), number(0, acc), m);
  Tensor e = exp(s - m_safe);
  Tensor l = sum(e, {-1}, true);
  Tensor p = e / where(eq(l, number(0, acc)), number(1, acc), l);
  Tensor lse = squeeze(log(l) + m_safe, -1);
  return {p, lse};
}

// Z of the probabilities `p` before `@ v`: 0 where dropped, 1 / (1 - p) elsewhere, in p's dtype,
// at the scores' full batch shape (v's batch dims broadcast in), from the call's draw.
Tensor dropout_factors(const Tensor& p, const Tensor& v, const ProbabilityDropout& dropout) {
  Shape batch =
      broadcast_shapes(Shape(p.impl().shape.begin(), p.impl().shape.end() - 2),
                       Shape(v.impl().shape.begin(), v.impl().shape.end() - 2), "attention");
  OpAttrs draw;
  draw.shape = batch;
  draw.shape.push_back(p.impl().shape[p.dim() - 2]);
  draw.shape.push_back(p.impl().shape.back());
  draw.shape_exprs = scores_size_exprs({&p, &v}, {p, p.dim() - 2}, {p, p.dim() - 1}, draw.shape);
  draw.dtype = p.dtype();
  draw.device = p.device();
  const Tensor numbers[] = {dropout.seed, dropout.offset};
  Tensor u = dispatch1(OpId::random_uniform, numbers, draw);
  AttentionDropout d = attention_dropout(dropout.p, p.dtype());
  return cast(ge(u, d.threshold), p.dtype()) * d.scale;
}

std::int64_t group_of(const Tensor& q, const Tensor& k, const Tensor& v, std::string_view op) {
  return attention_group(q.impl().shape, k.impl().shape, v.impl().shape, op);
}

// Grouped-query attention as broadcast attention over views (runtime/attention_heads.h).
Tensor query_view(const Tensor& x, std::int64_t group, std::size_t trailing) {
  return x.defined() ? reshape(x, grouped_query_shape(x.impl().shape, group, trailing)) : x;
}
Tensor kv_view(const Tensor& x) {
  return reshape(x, grouped_kv_shape(x.impl().shape, 2));
}

}  // namespace

AttentionOutputs attention_decomposed(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& mask, double scale, bool causal,
                                      const ProbabilityDropout& dropout) {
  KILN_OP_SCOPE;
  if (std::int64_t g = group_of(q, k, v, "attention"); g > 1) {
    AttentionOutputs r = attention_decomposed(query_view(q, g, 2), kv_view(k), kv_view(v),
                                              query_view(mask, g, 2), scale, causal, dropout);
    return {reshape(r.out, ungrouped_shape(r.out.impl().shape, 2)),
            reshape(r.lse, ungrouped_shape(r.lse.impl().shape, 1))};
  }
  DType acc = accumulation_dtype(q);
  Tensor s = masked_scores(cast(q, acc), cast(k, acc), mask, scale, causal);
  Probabilities pr = probabilities(s);
  Tensor p = dropout.p > 0 ? pr.p * dropout_factors(pr.p, v, dropout) : pr.p;
  return {cast(matmul(p, cast(v, acc)), q.dtype()), pr.lse};
}

AttentionGradients attention_gradients_decomposed(const Tensor& q, const Tensor& k, const Tensor& v,
                                                  const Tensor& mask, const Tensor& dout,
                                                  const Tensor& dlse, double scale, bool causal,
                                                  const ProbabilityDropout& dropout) {
  KILN_OP_SCOPE;
  if (std::int64_t g = group_of(q, k, v, "attention_backward"); g > 1) {
    // Each gradient at its operand's grouped view (dk, dv summed over the group), then back.
    AttentionGradients r = attention_gradients_decomposed(
        query_view(q, g, 2), kv_view(k), kv_view(v), query_view(mask, g, 2), query_view(dout, g, 2),
        query_view(dlse, g, 1), scale, causal, dropout);
    auto back = [](const Tensor& grad, const Tensor& like) {
      return grad.defined() ? reshape(grad, like.impl().shape) : grad;
    };
    return {back(r.dq, q), back(r.dk, k), back(r.dv, v), back(r.dmask, mask)};
  }
  DType acc = accumulation_dtype(q);
  Tensor qa = cast(q, acc), ka = cast(k, acc), va = cast(v, acc);
  Tensor p = probabilities(masked_scores(qa, ka, mask, scale, causal)).p;
  // With dropout out = (P ∘ Z) V: dV reads P ∘ Z, and the probabilities' gradient is dP ∘ Z.
  Tensor z = dropout.p > 0 ? dropout_factors(p, va, dropout) : Tensor();
  // dS = P ∘ (dP − rowsum(P ∘ dP) + dlse): the softmax's backward, and lse's (∂lse/∂s = P).
  Tensor ds;
  Tensor dv;
  if (dout.defined()) {
    Tensor da = cast(dout, acc);
    Tensor dp = matmul(da, transpose(va, -2, -1));
    if (z.defined()) dp = dp * z;
    ds = p * (dp - sum(p * dp, {-1}, true));
    dv = matmul(transpose(z.defined() ? p * z : p, -2, -1), da);
  } else {
    ds = zeros(p.impl().shape, acc, p.device());
    dv = zeros(v.impl().shape, acc, v.device());
  }
  if (dlse.defined()) ds = ds + p * unsqueeze(cast(dlse, acc), -1);
  Tensor dq = matmul(ds, ka) * number(scale, acc);
  Tensor dk = matmul(transpose(ds, -2, -1), qa) * number(scale, acc);
  auto fit = [](const Tensor& g, const Tensor& like) {
    return cast(sum_to(g, like.impl().shape), like.dtype());
  };
  AttentionGradients grads{fit(dq, q), fit(dk, k), fit(dv, v), Tensor()};
  if (mask.defined() && is_floating(mask.dtype())) grads.dmask = fit(ds, mask);
  return grads;
}

}  // namespace autograd
}  // namespace kiln
