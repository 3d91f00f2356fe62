// Floating-point instructions on f32/f64 (and, through ops_half, f16/bf16 and their x2 forms):
// add sub mul fma mad div abs neg min max rcp sqrt rsqrt sin cos lg2 ex2 tanh copysign testp.
// Approximate forms are computed with libm, which is well inside the PTX ISA's error bounds.
#include <cfenv>
#include <cmath>

#include "runtime/cuda/virtual/float_format.h"
#include "runtime/cuda/virtual/ops_float.h"
#include "runtime/cuda/virtual/ops_util.h"

namespace kiln::cuda::vgpu {
namespace {

template <class T>
inline T flush(T x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(T(0), x) : x;
}

template <class T>
inline T fmin_ptx(T a, T b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  if (a == b) return std::signbit(a) ? a : b;  // -0 < +0
  return a < b ? a : b;
}
template <class T>
inline T fmax_ptx(T a, T b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}

template <class T>
T compute(std::uint8_t op, T a, T b, T c) {
  switch (static_cast<FloatOp>(op)) {
    case FloatOp::kAdd:
      return a + b;
    case FloatOp::kSub:
      return a - b;
    case FloatOp::kMul:
      return a * b;
    case FloatOp::kFma:
      return std::fma(a, b, c);
    case FloatOp::kDiv:
      return a / b;
    case FloatOp::kMin:
      return fmin_ptx(a, b);
    case FloatOp::kMax:
      return fmax_ptx(a, b);
    case FloatOp::kMinNaN:
      return std::isnan(a) || std::isnan(b) ? T(NAN) : fmin_ptx(a, b);
    case FloatOp::kMaxNaN:
      return std::isnan(a) || std::isnan(b) ? T(NAN) : fmax_ptx(a, b);
    case FloatOp::kAbs:
      return std::fabs(a);
    case FloatOp::kNeg:
      return -a;
    case FloatOp::kRcp:
      return T(1) / a;
    case FloatOp::kSqrt:
      return std::sqrt(a);
    case FloatOp::kRsqrt:
      return T(1) / std::sqrt(a);
    case FloatOp::kSin:
      return std::sin(a);
    case FloatOp::kCos:
      return std::cos(a);
    case FloatOp::kLg2:
      return std::log2(a);
    case FloatOp::kEx2:
      return std::exp2(a);
    case FloatOp::kTanh:
      return std::tanh(a);
    case FloatOp::kCopysign:
      return std::copysign(b, a);
  }
  return a;
}

inline int fe_mode(Round r) {
  switch (r) {
    case Round::kRz:
      return FE_TOWARDZERO;
    case Round::kRm:
      return FE_DOWNWARD;
    case Round::kRp:
      return FE_UPWARD;
    default:
      return FE_TONEAREST;
  }
}

// Any f32/f64 op with rounding mode (mod2), .ftz and .sat.
template <class T>
void general(ThreadState& t, const Instr& in) {
  T a = get<T>(t, in.s[0]), b = get<T>(t, in.s[1]), c = get<T>(t, in.s[2]);
  bool ftz = in.flags & kFlagFtz;
  if (ftz) a = flush(a), b = flush(b), c = flush(c);
  T r;
  Round mode = static_cast<Round>(in.mod2);
  if (mode == Round::kRz || mode == Round::kRm || mode == Round::kRp) {
    volatile T va = a, vb = b, vc = c;
    std::fesetround(fe_mode(mode));
    volatile T vr = compute<T>(in.mod, va, vb, vc);
    std::fesetround(FE_TONEAREST);
    r = vr;
  } else {
    r = compute<T>(in.mod, a, b, c);
  }
  if (ftz) r = flush(r);
  if (in.flags & kFlagSat) r = std::isnan(r) ? T(0) : std::clamp(r, T(0), T(1));
  put<T>(t, in.d[0], r);
}

template <class T>
void fadd(ThreadState& t, const Instr& in) {
  put<T>(t, in.d[0], get<T>(t, in.s[0]) + get<T>(t, in.s[1]));
}
template <class T>
void fsub(ThreadState& t, const Instr& in) {
  put<T>(t, in.d[0], get<T>(t, in.s[0]) - get<T>(t, in.s[1]));
}
template <class T>
void fmul(ThreadState& t, const Instr& in) {
  put<T>(t, in.d[0], get<T>(t, in.s[0]) * get<T>(t, in.s[1]));
}
template <class T>
void ffma(ThreadState& t, const Instr& in) {
  put<T>(t, in.d[0], std::fma(get<T>(t, in.s[0]), get<T>(t, in.s[1]), get<T>(t, in.s[2])));
}
template <class T>
void fneg(ThreadState& t, const Instr& in) {
  put<T>(t, in.d[0], -get<T>(t, in.s[0]));
}
template <class T>
void fabs_op(ThreadState& t, const Instr& in) {
  put<T>(t, in.d[0], std::fabs(get<T>(t, in.s[0])));
}

template <class T>
void testp_op(ThreadState& t, const Instr& in) {
  T a = get<T>(t, in.s[0]);
  bool r = false;
  switch (in.mod) {
    case 0:
      r = std::isfinite(a);
      break;
    case 1:
      r = std::isinf(a);
      break;
    case 2:
      r = !std::isnan(a);
      break;
    case 3:
      r = std::isnan(a);
      break;
    case 4:
      r = std::isnormal(a);
      break;
    case 5:
      r = std::fpclassify(a) == FP_SUBNORMAL;
      break;
  }
  t.r[in.d[0]] = r;
}

int arity(FloatOp op) {
  switch (op) {
    case FloatOp::kFma:
      return 3;
    case FloatOp::kAbs:
    case FloatOp::kNeg:
    case FloatOp::kRcp:
    case FloatOp::kSqrt:
    case FloatOp::kRsqrt:
    case FloatOp::kSin:
    case FloatOp::kCos:
    case FloatOp::kLg2:
    case FloatOp::kEx2:
    case FloatOp::kTanh:
      return 1;
    default:
      return 2;
  }
}

}  // namespace

void decode_float_op(DecodeCtx& c, OpInfo& info, Instr& in, FloatOp op) {
  in.type = info.type();
  in.mod = static_cast<std::uint8_t>(op);
  in.mod2 = take_rounding(info);
  if (info.take("ftz")) in.flags |= kFlagFtz;
  if (info.take("sat")) in.flags |= kFlagSat;
  if (info.take("approx")) in.flags |= kFlagApprox;
  info.take("full");
  if (info.take("relu")) in.flags |= kFlagRelu;
  if ((op == FloatOp::kMin || op == FloatOp::kMax) && info.take("NaN"))
    in.mod = static_cast<std::uint8_t>(op == FloatOp::kMin ? FloatOp::kMinNaN : FloatOp::kMaxNaN);
  decode_dst_srcs(c, in, in.type, arity(op));
  if (in.type == Type::kF16 || in.type == Type::kF16x2 || in.type == Type::kBF16 ||
      in.type == Type::kBF16x2) {
    in.fn = half_handler(c, info, in);
    return;
  }
  if (in.flags & kFlagRelu) c.fail(".relu is only implemented for 16-bit float types");
  if (in.type != Type::kF32 && in.type != Type::kF64)
    c.fail(fmt::format("type .{} not supported for this operation", type_name(in.type)));
  bool f32 = in.type == Type::kF32;
  bool plain =
      !(in.flags & (kFlagFtz | kFlagSat)) && (in.mod2 == static_cast<std::uint8_t>(Round::kNone) ||
                                              in.mod2 == static_cast<std::uint8_t>(Round::kRn));
  if (plain) {
    switch (op) {
      case FloatOp::kAdd:
        in.fn = f32 ? fadd<float> : fadd<double>;
        return;
      case FloatOp::kSub:
        in.fn = f32 ? fsub<float> : fsub<double>;
        return;
      case FloatOp::kMul:
        in.fn = f32 ? fmul<float> : fmul<double>;
        return;
      case FloatOp::kFma:
        in.fn = f32 ? ffma<float> : ffma<double>;
        return;
      case FloatOp::kNeg:
        in.fn = f32 ? fneg<float> : fneg<double>;
        return;
      case FloatOp::kAbs:
        in.fn = f32 ? fabs_op<float> : fabs_op<double>;
        return;
      default:
        break;
    }
  }
  in.fn = f32 ? general<float> : general<double>;
}

void add_float_decoders(DecoderTable& table) {
  auto wrap = [&](const char* name, FloatOp op) {
    OpDecoder int_dec = table.count(name) ? table[name] : OpDecoder{};
    table[name] = [int_dec, op](DecodeCtx& c, OpInfo& info, Instr& in) {
      if (is_float(info.type()) || !int_dec) {
        decode_float_op(c, info, in, op);
        return;
      }
      int_dec(c, info, in);
    };
  };
  wrap("add", FloatOp::kAdd);
  wrap("sub", FloatOp::kSub);
  wrap("mul", FloatOp::kMul);
  wrap("mad", FloatOp::kFma);
  wrap("fma", FloatOp::kFma);
  wrap("div", FloatOp::kDiv);
  wrap("min", FloatOp::kMin);
  wrap("max", FloatOp::kMax);
  wrap("abs", FloatOp::kAbs);
  wrap("neg", FloatOp::kNeg);
  wrap("rcp", FloatOp::kRcp);
  wrap("sqrt", FloatOp::kSqrt);
  wrap("rsqrt", FloatOp::kRsqrt);
  wrap("sin", FloatOp::kSin);
  wrap("cos", FloatOp::kCos);
  wrap("lg2", FloatOp::kLg2);
  wrap("ex2", FloatOp::kEx2);
  wrap("tanh", FloatOp::kTanh);
  wrap("copysign", FloatOp::kCopysign);
  table["testp"] = [](DecodeCtx& c, OpInfo& info, Instr& in) {
    in.type = info.type();
    int m = info.take_one({"finite", "infinite", "number", "notanumber", "normal", "subnormal"});
    if (m < 0) c.fail("missing test");
    in.mod = static_cast<std::uint8_t>(m);
    if (in.type == Type::kF32)
      in.fn = testp_op<float>;
    else if (in.type == Type::kF64)
      in.fn = testp_op<double>;
    else
      c.fail("testp needs .f32 or .f64");
    decode_dst_srcs(c, in, in.type, 1);
  };
}

}  // namespace kiln::cuda::vgpu
