// matmul (+ bias + activation) on CUDA tensors as ONE cuBLASLt call through the backend's BLAS-Lt
// service: row-major tensors are handed over as column-major operands with A and B swapped
// (out^T = b^T a^T), so `linear`'s transposed weight needs no copy and batches are strided.
// Every documented rule is checked first; a failure names the rule, and the caller falls back
// to the generated GEMM (matmul.h) and generated epilogue kernels.
#pragma once

#include <atomic>
#include <optional>
#include <string>

#include "runtime/cuda/blaslt/descriptors.h"
#include "runtime/linear_epilogue.h"
#include "runtime/tensor.h"

namespace kiln::jit::codegen {

// The runtime-level enum (autograd describes its calls with it too).
using kiln::Activation;
using kiln::activation_name;

// out = act(a @ b + bias): a [..., M, K], b [..., K, N] (batch dims broadcast), bias [N].
struct LtForward {
  Tensor a, b;
  Tensor bias;  // undefined: no bias
  Activation act = Activation::none;
  // Also produce what the backward needs: the pre-activation (GELU, a [..., M, N] tensor of the
  // output's dtype) or the ReLU bitmask (opaque bytes, cuBLASLt's format).
  bool save_aux = false;
  // The output's dtype when it is not a's: f32 for f16/bf16 operands (cuBLASLt's C/D type
  // CUDA_R_32F), the product written from the f32 accumulator without rounding to 16 bits.
  std::optional<DType> out_dtype;
};

struct LtResult {
  Tensor out;
  Tensor aux;                     // with save_aux
  std::int64_t aux_ld = 0;        // elements (GELU) or bits (ReLU mask)
  cuda::blaslt::MatmulSpec spec;  // what was asked of cuBLASLt (pointers of this call)
};

// The epilogue `problem` lowers to: BIAS, RELU_AUX_BIAS, GELU_BIAS, ...
cublasLtEpilogue_t forward_epilogue(bool bias, Activation act, bool save_aux);

// The first rule `problem` breaks, or "" when cuBLASLt takes it. Static rules (dtypes,
// activation, aux ld) and per-call ones (operand strides, pointer alignment).
std::string lt_rule_failure(const LtForward& problem);

// Runs it; nullopt with `*why` set when a rule fails or cuBLASLt finds no algorithm for it.
std::optional<LtResult> try_lt_forward(const LtForward& problem, std::string* why);

// The backward forms, as autograd asks for them (runtime/linear_epilogue.h): out = a @ b, then
//  - act relu / gelu_tanh: times act'(pre-activation), read from the forward's `aux` (DRELU,
//    DGELU), and with bias_grad the bias gradient of that result, summed over its rows
//    (DRELU_BGRAD, DGELU_BGRAD): dz = (dy @ W) * gelu'(z) and db = sum(dz) in one call;
//  - act none with bias_grad: the sum over k of each row of `a` (BGRADB; a = dy^T gives
//    db = sum of dy's rows next to dW = dy^T @ x).
//  With out_dtype f32 (f16/bf16 operands, no activation), the product and the bias gradient
//  are written in f32, both D's type (autocast's f32 weight and bias gradients).
struct LtBackward : LinearBackwardCall {
  LtBackward() = default;
  LtBackward(const LinearBackwardCall& call)
      : LinearBackwardCall(call) {}  // NOLINT: as autograd asks
  std::optional<DType> out_dtype;
};
struct LtGrad {
  Tensor out;
  Tensor bias_grad;
  cuda::blaslt::MatmulSpec spec;
};
std::optional<LtGrad> try_lt_backward(const LtBackward& problem, std::string* why);

// KILN_LOG=fusion: "kiln: <what> -> generated GEMM + epilogue kernel: <why>", once per message.
void log_lt_fallback(std::string_view what, const std::string& why);

// Library calls made through this path and fallbacks taken (benchmarks and tests read them).
struct LtStats {
  std::atomic<std::int64_t> calls{0};
  std::atomic<std::int64_t> fallbacks{0};
  std::atomic<std::int64_t> bytes_read{0};
  std::atomic<std::int64_t> bytes_written{0};
};
LtStats& lt_stats();

// Whether f32 matmuls may use TF32 (KILN_MATMUL_TF32=1, or set_allow_tf32).
bool allow_tf32();
void set_allow_tf32(bool allow);

}  // namespace kiln::jit::codegen
