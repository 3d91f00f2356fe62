// What autocast (runtime/autocast.h) does to each op of the API: the cast policies of PyTorch's
// CUDA autocast op lists (aten/src/ATen/autocast_mode.h), applied where the op API is called,
// before dispatch, so a trace records the casts as nodes and a replayed graph never casts again.
//
// A primitive's policy is its row's autocast column in runtime/ops.def (lower precision:
// matmul and bmm; f32: exp, log, log1p, expm1, reciprocal, rsqrt, pow, softplus, softmax,
// log_softmax, sum, prod, cumsum; promote: scatter_add; cat and where promote by themselves).
// Composites name theirs where they are written:
//
//   lower precision (f16/bf16, f32 accumulation): linear, feed_forward, einsum
//   f32: logsumexp, layer_norm, rms_norm, cross_entropy, mse_loss
//   anything else runs in its inputs' dtypes; mean, var and std too, as PyTorch's native ones
//
// Only f32, f16 and bf16 tensors are cast (f64 and integers never are). A listed op's own body
// runs with autocast off, as PyTorch's autocast kernels redispatch below the autocast key; so
// does the autograd engine, whose backward follows the dtypes the forward chose.
#pragma once

#include <vector>

#include "runtime/autocast.h"
#include "runtime/op.h"
#include "runtime/tensor.h"

namespace kiln::autograd {

// `x` cast as `policy` asks under the current autocast state; `x` itself when autocast is off,
// for undefined tensors and for dtypes autocast leaves alone.
Tensor autocast_input(AutocastPolicy policy, const Tensor& x);
// Every input cast as `policy` asks; promote casts to the widest eligible input dtype.
std::vector<Tensor> autocast_inputs(AutocastPolicy policy, std::vector<Tensor> inputs);
// The inputs of primitive `op` cast as its op-table row asks.
inline Tensor autocast_input(OpId op, const Tensor& x) {
  return autocast_input(op_def(op).autocast, x);
}
inline std::vector<Tensor> autocast_inputs(OpId op, std::vector<Tensor> inputs) {
  return autocast_inputs(op_def(op).autocast, std::move(inputs));
}

// Turns autocast off for its scope: a listed op's body, the backward pass.
class AutocastOff : public AutocastScope {
 public:
  AutocastOff() : AutocastScope(AutocastState{}) {}
};

}  // namespace kiln::autograd
