// Shared by the float families: the operation codes and the f16/bf16 handler picker.
#pragma once

#include <cstdint>

#include "runtime/cuda/virtual/decoder.h"

namespace kiln::cuda::vgpu {

enum class FloatOp : std::uint8_t {
  add,
  sub,
  mul,
  fma,
  div,
  min,
  max,
  min_na_n,
  max_na_n,
  abs,
  neg,
  rcp,
  sqrt,
  rsqrt,
  sin,
  cos,
  lg2,
  ex2,
  tanh,
  copysign
};

void decode_float_op(DecodeCtx& c, OpcodeParts& info, Instr& in, FloatOp op);
// Handler for `in` (already decoded: type, mod = FloatOp, mod2 = rounding, flags) on
// f16 / f16x2 / bf16 / bf16x2.
Handler half_handler(DecodeCtx& c, OpcodeParts& info, Instr& in);

}  // namespace kiln::cuda::vgpu
