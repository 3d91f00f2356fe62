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
    case FloatOp::add:
      return a + b;
    case FloatOp::sub:
      return a - b;
    case FloatOp::mul:
      return a * b;
    case FloatOp::fma:
      return std::fma(a, b, c);
    case FloatOp::div:
      return a / b;
    case FloatOp::min:
      return fmin_ptx(a, b);
    case FloatOp::max:
      return fmax_ptx(a, b);
    case FloatOp::min_na_n:
      return std::isnan(a) || std::isnan(b) ? T(NAN) : fmin_ptx(a, b);
    case FloatOp::max_na_n:
      return std::isnan(a) || std::isnan(b) ? T(NAN) : fmax_ptx(a, b);
    case FloatOp::abs:
      return std::fabs(a);
    case FloatOp::neg:
      return -a;
    case FloatOp::rcp:
      return T(1) / a;
    case FloatOp::sqrt:
      return std::sqrt(a);
    case FloatOp::rsqrt:
      return T(1) / std::sqrt(a);
    case FloatOp::sin:
      return std::sin(a);
    case FloatOp::cos:
      return std::cos(a);
    case FloatOp::lg2:
      return std::log2(a);
    case FloatOp::ex2:
      return std::exp2(a);
    case FloatOp::tanh:
      return std::tanh(a);
    case FloatOp::copysign:
      return std::copysign(b, a);
  }
  return a;
}

inline int fe_mode(Round r) {
  switch (r) {
    case Round::rz:
      return FE_TOWARDZERO;
    case Round::rm:
      return FE_DOWNWARD;
    case Round::rp:
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
  if (mode == Round::rz || mode == Round::rm || mode == Round::rp) {
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
    case FloatOp::fma:
      return 3;
    case FloatOp::abs:
    case FloatOp::neg:
    case FloatOp::rcp:
    case FloatOp::sqrt:
    case FloatOp::rsqrt:
    case FloatOp::sin:
    case FloatOp::cos:
    case FloatOp::lg2:
    case FloatOp::ex2:
    case FloatOp::tanh:
      return 1;
    default:
      return 2;
  }
}

}  // namespace

void decode_float_op(DecodeCtx& c, OpcodeParts& info, Instr& in, FloatOp op) {
  in.type = info.type();
  in.mod = static_cast<std::uint8_t>(op);
  in.mod2 = take_rounding(info);
  if (info.take("ftz")) in.flags |= kFlagFtz;
  if (info.take("sat")) in.flags |= kFlagSat;
  if (info.take("approx")) in.flags |= kFlagApprox;
  info.take("full");
  if (info.take("relu")) in.flags |= kFlagRelu;
  if ((op == FloatOp::min || op == FloatOp::max) && info.take("NaN"))
    in.mod = static_cast<std::uint8_t>(op == FloatOp::min ? FloatOp::min_na_n : FloatOp::max_na_n);
  decode_dst_srcs(c, in, in.type, arity(op));
  if (in.type == Type::f16 || in.type == Type::f16x2 || in.type == Type::bf16 ||
      in.type == Type::bf16x2) {
    in.fn = half_handler(c, info, in);
    return;
  }
  if (in.flags & kFlagRelu) c.fail(".relu is only implemented for 16-bit float types");
  if (in.type != Type::f32 && in.type != Type::f64)
    c.fail(fmt::format("type .{} not supported for this operation", type_name(in.type)));
  bool f32 = in.type == Type::f32;
  bool plain =
      !(in.flags & (kFlagFtz | kFlagSat)) && (in.mod2 == static_cast<std::uint8_t>(Round::none) ||
                                              in.mod2 == static_cast<std::uint8_t>(Round::rn));
  if (plain) {
    switch (op) {
      case FloatOp::add:
        in.fn = f32 ? fadd<float> : fadd<double>;
        return;
      case FloatOp::sub:
        in.fn = f32 ? fsub<float> : fsub<double>;
        return;
      case FloatOp::mul:
        in.fn = f32 ? fmul<float> : fmul<double>;
        return;
      case FloatOp::fma:
        in.fn = f32 ? ffma<float> : ffma<double>;
        return;
      case FloatOp::neg:
        in.fn = f32 ? fneg<float> : fneg<double>;
        return;
      case FloatOp::abs:
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
    table[name] = [int_dec, op](DecodeCtx& c, OpcodeParts& info, Instr& in) {
      if (is_float(info.type()) || !int_dec) {
        decode_float_op(c, info, in, op);
        return;
      }
      int_dec(c, info, in);
    };
  };
  wrap("add", FloatOp::add);
  wrap("sub", FloatOp::sub);
  wrap("mul", FloatOp::mul);
  wrap("mad", FloatOp::fma);
  wrap("fma", FloatOp::fma);
  wrap("div", FloatOp::div);
  wrap("min", FloatOp::min);
  wrap("max", FloatOp::max);
  wrap("abs", FloatOp::abs);
  wrap("neg", FloatOp::neg);
  wrap("rcp", FloatOp::rcp);
  wrap("sqrt", FloatOp::sqrt);
  wrap("rsqrt", FloatOp::rsqrt);
  wrap("sin", FloatOp::sin);
  wrap("cos", FloatOp::cos);
  wrap("lg2", FloatOp::lg2);
  wrap("ex2", FloatOp::ex2);
  wrap("tanh", FloatOp::tanh);
  wrap("copysign", FloatOp::copysign);
  table["testp"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    in.type = info.type();
    int m = info.take_one({"finite", "infinite", "number", "notanumber", "normal", "subnormal"});
    if (m < 0) c.fail("missing test");
    in.mod = static_cast<std::uint8_t>(m);
    if (in.type == Type::f32)
      in.fn = testp_op<float>;
    else if (in.type == Type::f64)
      in.fn = testp_op<double>;
    else
      c.fail("testp needs .f32 or .f64");
    decode_dst_srcs(c, in, in.type, 1);
  };
}

}  // namespace kiln::cuda::vgpu
