// Scaled dot-product attention written with primitive ops: the decomposition the CUDA backend
// runs where no fused kernel takes a call, and the differentiable form attention's derivative
// rule uses for second derivatives. The op itself is `attention` in runtime/ops.def; the user
// API is scaled_dot_product_attention (autograd/ops.h).
#pragma once

#include "runtime/tensor.h"

namespace kiln::autograd {

// out [..., T, dv] in q's dtype and lse [..., T] (f32, f64 for f64) of the `attention` op, as
// matmul, where, amax, exp, sum, log: the scores materialized, accumulated in f32 (f64 for f64).
// A fully masked row gives out 0 and lse -inf, as the op does.
struct AttentionOutputs {
  Tensor out, lse;
};
// Dropout of the probabilities at rate p (0: none) from the draw at (seed, offset), 0-dim i64
// tensors: the numbers dropout(softmax(..)) would draw for the [..., T, S] probabilities.
struct ProbabilityDropout {
  double p = 0;
  Tensor seed, offset;
};
AttentionOutputs attention_decomposed(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& mask, double scale, bool causal,
                                      const ProbabilityDropout& dropout = {});

// 0, 1, ..., n - 1 along `dim` of a tensor of rank `rank` (size 1 elsewhere), made on `device` by
// a running count: the index grids the decompositions mask with, without arange's host copy.
Tensor device_counts(std::int64_t n, std::int64_t dim, std::int64_t rank, DType dtype,
                     Device device);

// cached_attention (autograd/ops.h) as primitive ops: the visible rows as a bool mask [B, 1, T, S]
// over attention_decomposed, where the kernels do not take a call (f64, wide heads).
Tensor cached_attention_decomposed(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                   const Tensor& lengths, const Tensor& starts, double scale);

// The gradients of out and lse (`dout` or `dlse` may be undefined) taken to q, k, v and a
// floating mask (dmask undefined for a bool mask or none), recomputing the probabilities from
// q and k: differentiable again when grad mode is on. Each has its input's shape and dtype.
struct AttentionGradients {
  Tensor dq, dk, dv, dmask;
};
AttentionGradients attention_gradients_decomposed(const Tensor& q, const Tensor& k, const Tensor& v,
                                                  const Tensor& mask, const Tensor& dout,
                                                  const Tensor& dlse, double scale, bool causal,
                                                  const ProbabilityDropout& dropout = {});

}  // namespace kiln::autograd
