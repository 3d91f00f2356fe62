// f16 / bf16 arithmetic, scalar and packed x2 (cuda_fp16.hpp and cuda_bf16.hpp emit these from
// inline asm). Each lane is computed in double and rounded once to the 16-bit format.
#include <cmath>

#include "runtime/cuda/virtual/float_format.h"
#include "runtime/cuda/virtual/ops_float.h"
#include "runtime/cuda/virtual/ops_util.h"

namespace kiln::cuda::vgpu {
namespace {

template <bool Bf>
inline double to_double(std::uint16_t h) {
  return Bf ? bf16_to_float(h) : half_to_float(h);
}

template <bool Bf>
inline std::uint16_t lane_op(const Instr& in, std::uint16_t ha, std::uint16_t hb,
                             std::uint16_t hc) {
  constexpr FloatFormat fmt = Bf ? FloatFormat::kBF16 : FloatFormat::kF16;
  double a = to_double<Bf>(ha), b = to_double<Bf>(hb), c = to_double<Bf>(hc);
  bool ftz = in.flags & kFlagFtz;
  auto flush = [](double x) {
    double lim = Bf ? 1.1754943508222875e-38 : 6.103515625e-05;
    return (x != 0 && std::fabs(x) < lim) ? std::copysign(0.0, x) : x;
  };
  if (ftz) a = flush(a), b = flush(b), c = flush(c);
  double r = 0;
  switch (static_cast<FloatOp>(in.mod)) {
    case FloatOp::kAdd:
      r = a + b;
      break;
    case FloatOp::kSub:
      r = a - b;
      break;
    case FloatOp::kMul:
      r = a * b;
      break;
    case FloatOp::kFma:
      r = std::fma(a, b, c);
      break;
    case FloatOp::kDiv:
      r = a / b;
      break;
    case FloatOp::kMin:
      r = std::isnan(a) ? b : std::isnan(b) ? a : std::min(a, b);
      break;
    case FloatOp::kMax:
      r = std::isnan(a) ? b : std::isnan(b) ? a : std::max(a, b);
      break;
    case FloatOp::kMinNaN:
      r = std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
      break;
    case FloatOp::kMaxNaN:
      r = std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
      break;
    case FloatOp::kAbs:
      return static_cast<std::uint16_t>(ha & 0x7fff);
    case FloatOp::kNeg:
      return static_cast<std::uint16_t>(ha ^ 0x8000);
    case FloatOp::kRcp:
      r = 1.0 / a;
      break;
    case FloatOp::kSqrt:
      r = std::sqrt(a);
      break;
    case FloatOp::kRsqrt:
      r = 1.0 / std::sqrt(a);
      break;
    case FloatOp::kSin:
      r = std::sin(a);
      break;
    case FloatOp::kCos:
      r = std::cos(a);
      break;
    case FloatOp::kLg2:
      r = std::log2(a);
      break;
    case FloatOp::kEx2:
      r = std::exp2(a);
      break;
    case FloatOp::kTanh:
      r = std::tanh(a);
      break;
    case FloatOp::kCopysign:
      r = std::copysign(b, a);
      break;
  }
  if (in.flags & kFlagSat) r = std::isnan(r) ? 0.0 : std::clamp(r, 0.0, 1.0);
  if ((in.flags & kFlagRelu) && !std::isnan(r) && r < 0) r = 0.0;
  if (ftz) r = flush(r);
  Round mode = static_cast<Round>(in.mod2);
  std::uint16_t bits = static_cast<std::uint16_t>(encode_float(fmt, r, mode));
  if (ftz && (bits & 0x7fff) != 0 && (bits & (Bf ? 0x7f80 : 0x7c00)) == 0)
    bits &= 0x8000;  // rounded into the subnormal range
  return bits;
}

template <bool Bf, bool Packed>
void half_op(ThreadState& t, const Instr& in) {
  std::uint32_t a = get<std::uint32_t>(t, in.s[0]), b = get<std::uint32_t>(t, in.s[1]),
                c = get<std::uint32_t>(t, in.s[2]);
  std::uint32_t r = lane_op<Bf>(in, std::uint16_t(a), std::uint16_t(b), std::uint16_t(c));
  if constexpr (Packed)
    r |= std::uint32_t(lane_op<Bf>(in, std::uint16_t(a >> 16), std::uint16_t(b >> 16),
                                   std::uint16_t(c >> 16)))
         << 16;
  put<std::uint32_t>(t, in.d[0], r);
}

}  // namespace

Handler half_handler(DecodeCtx& c, OpInfo& info, Instr& in) {
  (void)info;
  switch (in.type) {
    case Type::kF16:
      return half_op<false, false>;
    case Type::kF16x2:
      return half_op<false, true>;
    case Type::kBF16:
      return half_op<true, false>;
    case Type::kBF16x2:
      return half_op<true, true>;
    default:
      c.fail("not a 16-bit float type");
  }
}

}  // namespace kiln::cuda::vgpu
