// The fuser offers each matmul its elementwise neighbours: a matmul group whose only consumer is
// a pointwise group computing exactly `+ bias` and/or one activation (relu, gelu(x, tanh)), and/or
// last a cast of a f16/bf16 product to f32, becomes ONE cuBLASLt call with the matching epilogue
// (BIAS, RELU_BIAS, GELU_BIAS, ...) writing the group's dtype. Anything else
// (exact-erf GELU, other ops in the group, dtypes cuBLASLt does not take) keeps the plain GEMM +
// the generated epilogue kernel, and KILN_LOG=fusion says which rule failed.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "graph/fusion.h"
#include "graph/graph.h"
#include "jit/codegen/lt_matmul.h"

namespace kiln::jit::codegen {

struct EpilogueLowering {
  int matmul_group = -1;
  int epilogue_group = -1;  // the pointwise group the epilogue replaces
  int matmul_node = -1;
  int bias_value = -1;  // -1: no bias
  Activation act = Activation::none;
  int out_value = -1;  // the value the call writes (the epilogue group's output)
  // The pre-activation when the group also writes it (a training forward saves it for GELU's
  // derivative): cuBLASLt's GELU_AUX form writes it beside the output.
  int aux_value = -1;
  // A weight gradient dW = dYᵀ @ X whose dY's column sum (the bias gradient) a reduction group
  // computes: cuBLASLt's BGRADB gives both. epilogue_group is then the reduction group, which
  // the plan runs right after the matmul, and this is the sum it writes.
  int bias_grad_value = -1;
  // The f32 value the epilogue group writes for bias_grad_value (reshaped, cast from f16/bf16:
  // autocast's bias gradient), or -1: made from the call's 16-bit bias gradient by one cast
  // launch, as cuBLASLt writes bias gradients in D's type.
  int bias_grad_widened_value = -1;
  // A BGRADB call whose product and column sum are both cast to f32 (autocast's f32 weight and
  // bias): the product's cast group, which the call also computes (out_dtype f32, out_value the
  // cast's output, bias_grad_value the f32 sum the reduction group writes), or -1.
  int widening_group = -1;
  // Host view groups between the two that read the sum: they move after the matmul with it.
  std::vector<int> moved_views;
  // A backward form (DGELU_BGRAD): aux_value is then the forward's pre-activation it reads,
  // out_value the activation's gradient, bias_grad_value its column sum.
  bool backward = false;
  // The dtype the call writes when the epilogue group ends in a cast of the f16/bf16 product to
  // f32 (autocast's weight gradients): the call writes f32 from its f32 accumulator, so the
  // 16-bit product is never stored and read back. Unset: the matmul's dtype.
  std::optional<DType> out_dtype;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  std::string note;  // "cuBLASLt GELU_BIAS: matmul + add + gelu_tanh"
};

// The lowerings of `partition`; `log` gets one line per matmul group saying what it became
// and, when it keeps a generated epilogue kernel, which rule failed. A bias-gradient lowering's
// reduction group may come before its matmul group: the plan moves it to just after.
std::vector<EpilogueLowering> plan_epilogues(const graph::Graph& graph,
                                             const graph::Partition& partition,
                                             std::vector<std::string>& log);

// Runs one on `values` (indexed by graph value). False when a per-call rule fails (operand
// strides, alignment): the caller then runs the matmul and the epilogue group as they were.
bool run_epilogue(const graph::Graph& graph, const EpilogueLowering& lowering,
                  std::vector<Tensor>& values);

}  // namespace kiln::jit::codegen
