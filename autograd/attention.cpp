// scaled_dot_product_attention (the `attention` op) and its decomposition into primitive ops
// (see attention.h).
#include "autograd/attention.h"

#include <cmath>
#include <limits>

#include "autograd/ops.h"
#include "autograd/record.h"
#include "runtime/attention_heads.h"
#include "runtime/trace_hooks.h"

namespace kiln {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask, bool causal, std::optional<double> scale) {
  KILN_OP_SCOPE;
  KILN_CHECK_AS(ShapeError, q.defined() && q.dim() >= 1,
                "scaled_dot_product_attention: q needs rank >= 2 ([..., T, d])");
  OpAttrs attrs;
  std::int64_t d = q.impl().shape.back();
  attrs.scale = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(d > 0 ? d : 1));
  attrs.causal = causal;
  std::vector<Tensor> inputs{q, k, v};
  if (mask.defined()) inputs.push_back(mask);
  return autograd::record_outputs(OpId::attention, std::move(inputs), attrs)[0];
}

namespace autograd {

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
    // Key j <= query i, from running counts made on the scores' device (no host copy).
    std::int64_t t = s.impl().shape[s.dim() - 2], n = s.impl().shape.back();
    Tensor rows = cumsum(zeros({t, 1}, acc, s.device()) + number(1, acc), 0);
    Tensor cols = cumsum(zeros({1, n}, acc, s.device()) + number(1, acc), 1);
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
                                      const Tensor& mask, double scale, bool causal) {
  KILN_OP_SCOPE;
  if (std::int64_t g = group_of(q, k, v, "attention"); g > 1) {
    AttentionOutputs r = attention_decomposed(query_view(q, g, 2), kv_view(k), kv_view(v),
                                              query_view(mask, g, 2), scale, causal);
    return {reshape(r.out, ungrouped_shape(r.out.impl().shape, 2)),
            reshape(r.lse, ungrouped_shape(r.lse.impl().shape, 1))};
  }
  DType acc = accumulation_dtype(q);
  Tensor s = masked_scores(cast(q, acc), cast(k, acc), mask, scale, causal);
  Probabilities pr = probabilities(s);
  return {cast(matmul(pr.p, cast(v, acc)), q.dtype()), pr.lse};
}

AttentionGradients attention_gradients_decomposed(const Tensor& q, const Tensor& k, const Tensor& v,
                                                  const Tensor& mask, const Tensor& dout,
                                                  const Tensor& dlse, double scale, bool causal) {
  KILN_OP_SCOPE;
  if (std::int64_t g = group_of(q, k, v, "attention_backward"); g > 1) {
    // Each gradient at its operand's grouped view (dk, dv summed over the group), then back.
    AttentionGradients r = attention_gradients_decomposed(
        query_view(q, g, 2), kv_view(k), kv_view(v), query_view(mask, g, 2), query_view(dout, g, 2),
        query_view(dlse, g, 1), scale, causal);
    auto back = [](const Tensor& grad, const Tensor& like) {
      return grad.defined() ? reshape(grad, like.impl().shape) : grad;
    };
    return {back(r.dq, q), back(r.dk, k), back(r.dv, v), back(r.dmask, mask)};
  }
  DType acc = accumulation_dtype(q);
  Tensor qa = cast(q, acc), ka = cast(k, acc), va = cast(v, acc);
  Tensor p = probabilities(masked_scores(qa, ka, mask, scale, causal)).p;
  // dS = P ∘ (dP − rowsum(P ∘ dP) + dlse): the softmax's backward, and lse's (∂lse/∂s = P).
  Tensor ds;
  Tensor dv;
  if (dout.defined()) {
    Tensor da = cast(dout, acc);
    Tensor dp = matmul(da, transpose(va, -2, -1));
    ds = p * (dp - sum(p * dp, {-1}, true));
    dv = matmul(transpose(p, -2, -1), da);
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
