// Shared by the float families: the operation codes and the f16/bf16 handler picker.
#pragma once

#include <cstdint>

#include "runtime/cuda/virtual/decoder.h"

namespace kiln::cuda::vgpu {

enum class FloatOp : std::uint8_t {
  kAdd,
  kSub,
  kMul,
  kFma,
  kDiv,
  kMin,
  kMax,
  kMinNaN,
  kMaxNaN,
  kAbs,
  kNeg,
  kRcp,
  kSqrt,
  kRsqrt,
  kSin,
  kCos,
  kLg2,
  kEx2,
  kTanh,
  kCopysign
};

void decode_float_op(DecodeCtx& c, OpInfo& info, Instr& in, FloatOp op);
// Handler for `in` (already decoded: type, mod = FloatOp, mod2 = rounding, flags) on
// f16 / f16x2 / bf16 / bf16x2.
Handler half_handler(DecodeCtx& c, OpInfo& info, Instr& in);

}  // namespace kiln::cuda::vgpu
