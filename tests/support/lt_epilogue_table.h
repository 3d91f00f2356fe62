// The cuBLASLt epilogue a forward linear layer should get, written out as a table from the
// cuBLASLt documentation's enum names (bias: the _BIAS forms; an activation: RELU or GELU, the
// tanh approximation cuBLASLt computes; saving the aux: the _AUX forms), so that tests do not
// take the expected epilogue from the lowering's own jit::codegen::forward_epilogue.
#pragma once

#include "runtime/cuda/blaslt/blaslt.h"
#include "runtime/linear_epilogue.h"

namespace kiln::test {

struct ForwardEpilogueRow {
  bool bias;
  Activation act;
  bool aux;
  cublasLtEpilogue_t epilogue;
};

// clang-format off
inline constexpr ForwardEpilogueRow kForwardEpilogues[] = {
    {false, Activation::none,      false, CUBLASLT_EPILOGUE_DEFAULT},
    {true,  Activation::none,      false, CUBLASLT_EPILOGUE_BIAS},
    {false, Activation::relu,      false, CUBLASLT_EPILOGUE_RELU},
    {true,  Activation::relu,      false, CUBLASLT_EPILOGUE_RELU_BIAS},
    {false, Activation::relu,      true,  CUBLASLT_EPILOGUE_RELU_AUX},
    {true,  Activation::relu,      true,  CUBLASLT_EPILOGUE_RELU_AUX_BIAS},
    {false, Activation::gelu_tanh, false, CUBLASLT_EPILOGUE_GELU},
    {true,  Activation::gelu_tanh, false, CUBLASLT_EPILOGUE_GELU_BIAS},
    {false, Activation::gelu_tanh, true,  CUBLASLT_EPILOGUE_GELU_AUX},
    {true,  Activation::gelu_tanh, true,  CUBLASLT_EPILOGUE_GELU_AUX_BIAS},
};
// clang-format on

// The row's epilogue; -1 (no such row: an activation-less aux) fails any comparison.
inline int expected_forward_epilogue(bool bias, Activation act, bool aux) {
  for (const auto& row : kForwardEpilogues)
    if (row.bias == bias && row.act == act && row.aux == aux) return row.epilogue;
  return -1;
}

}  // namespace kiln::test
