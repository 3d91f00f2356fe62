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
  constexpr FloatFormat fmt = Bf ? FloatFormat::bf16 : FloatFormat::f16;
  double a = to_double<Bf>(ha), b = to_double<Bf>(hb), c = to_double<Bf>(hc);
  bool ftz = in.flags & kFlagFtz;
  auto flush = [](double x) {
    double lim = Bf ? 1.1754943508222875e-38 : 6.103515625e-05;
    return (x != 0 && std::fabs(x) < lim) ? std::copysign(0.0, x) : x;
  };
  if (ftz) a = flush(a), b = flush(b), c = flush(c);
  double r = 0;
  switch (static_cast<FloatOp>(in.mod)) {
    case FloatOp::add:
      r = a + b;
      break;
    case FloatOp::sub:
      r = a - b;
      break;
    case FloatOp::mul:
      r = a * b;
      break;
    case FloatOp::fma:
      r = std::fma(a, b, c);
      break;
    case FloatOp::div:
      r = a / b;
      break;
    case FloatOp::min:
      r = std::isnan(a) ? b : std::isnan(b) ? a : std::min(a, b);
      break;
    case FloatOp::max:
      r = std::isnan(a) ? b : std::isnan(b) ? a : std::max(a, b);
      break;
    case FloatOp::min_na_n:
      r = std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
      break;
    case FloatOp::max_na_n:
      r = std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
      break;
    case FloatOp::abs:
      return static_cast<std::uint16_t>(ha & 0x7fff);
    case FloatOp::neg:
      return static_cast<std::uint16_t>(ha ^ 0x8000);
    case FloatOp::rcp:
      r = 1.0 / a;
      break;
    case FloatOp::sqrt:
      r = std::sqrt(a);
      break;
    case FloatOp::rsqrt:
      r = 1.0 / std::sqrt(a);
      break;
    case FloatOp::sin:
      r = std::sin(a);
      break;
    case FloatOp::cos:
      r = std::cos(a);
      break;
    case FloatOp::lg2:
      r = std::log2(a);
      break;
    case FloatOp::ex2:
      r = std::exp2(a);
      break;
    case FloatOp::tanh:
      r = std::tanh(a);
      break;
    case FloatOp::copysign:
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

Handler half_handler(DecodeCtx& c, OpcodeParts& info, Instr& in) {
  (void)info;
  switch (in.type) {
    case Type::f16:
      return half_op<false, false>;
    case Type::f16x2:
      return half_op<false, true>;
    case Type::bf16:
      return half_op<true, false>;
    case Type::bf16x2:
      return half_op<true, true>;
    default:
      c.fail("not a 16-bit float type");
  }
}

}  // namespace kiln::cuda::vgpu
