// matmul + bias + activation as one library call, described with plain tensors: what autograd
// asks a backend for (Backend::linear_forward / linear_backward) without knowing how the backend
// computes it. jit/ answers on CUDA with cuBLASLt epilogues; every other backend declines.
#pragma once

#include <cstdint>
#include <string_view>

#include "runtime/tensor.h"

namespace kiln {

// The activations a GEMM epilogue applies (GELU is the tanh approximation, as cuBLASLt's).
enum class Activation : std::uint8_t { none, relu, gelu_tanh };
constexpr std::string_view activation_name(Activation act) {
  return act == Activation::relu ? "relu" : act == Activation::gelu_tanh ? "gelu_tanh" : "none";
}

// out = act(x @ weight^T + bias): x [..., in], weight [out, in], bias [out] or undefined.
struct LinearForwardCall {
  Tensor x, weight, bias;
  Activation act = Activation::none;
  // Also return what the backward's epilogue reads: the pre-activation (GELU) or the ReLU
  // bitmask (opaque bytes in the library's format).
  bool save_aux = false;
};
struct LinearForwardResult {
  Tensor out;
  Tensor aux;               // with save_aux
  std::int64_t aux_ld = 0;  // the aux's leading dimension: elements (GELU) or bits (ReLU)
};

// One backward GEMM: out = a @ b ([..., M, K] @ [K, N]), then
//  - act relu / gelu_tanh: times act'(pre-activation) read from a forward's aux, and with
//    bias_grad the column sums of that product (dz = (dy @ W) * act'(z), db = sum(dz));
//  - act none with bias_grad: the row sums of `a` (a = dz^T gives db next to dW = dz^T @ x).
struct LinearBackwardCall {
  Tensor a, b;
  Activation act = Activation::none;
  Tensor aux;
  std::int64_t aux_ld = 0;
  bool bias_grad = false;
};
struct LinearBackwardResult {
  Tensor out;
  Tensor bias_grad;  // with bias_grad
};

}  // namespace kiln
