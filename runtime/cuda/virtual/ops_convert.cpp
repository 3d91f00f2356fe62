// Data movement between registers and conversions: mov (incl. vector pack/unpack, symbol
// addresses, %clock), cvt among all integer and float types with rounding/.sat/.ftz, cvta,
// isspacep.
#include <chrono>
#include <cmath>
#include <limits>

#include "runtime/cuda/virtual/float_format.h"
#include "runtime/cuda/virtual/ops_util.h"

namespace kiln::cuda::vgpu {
namespace {

void mov_op(ThreadState& t, const Instr& in) {
  t.r[in.d[0]] = t.r[in.s[0]];
}
void mov_addr(ThreadState& t, const Instr& in) {
  t.r[in.d[0]] = t.r[in.addr] + static_cast<std::uint64_t>(in.imm);
}
void mov_clock(ThreadState& t, const Instr& in) {
  // The instruction count is only folded into t.icount when a thread stops, so each read also
  // advances the thread's clock: spin loops on clock64() terminate.
  t.clock_reads += 64;
  std::uint64_t clock = t.launch->clock + t.icount + t.clock_reads;
  std::uint64_t ns =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  std::uint64_t v = 0;
  switch (in.mod) {
    case 1:
      v = std::uint32_t(clock);
      break;
    case 2:
      v = std::uint32_t(clock >> 32);
      break;
    case 3:
      v = clock;
      break;
    case 4:
      v = ns;
      break;
    case 5:
      v = std::uint32_t(ns);
      break;
    case 6:
      v = std::uint32_t(ns >> 32);
      break;
  }
  t.r[in.d[0]] = v;
}
// mov.bN {d0, d1, ...}, a: element width in bits = in.imm.
void unpack_op(ThreadState& t, const Instr& in) {
  std::uint64_t a = t.r[in.s[0]];
  unsigned w = static_cast<unsigned>(in.imm);
  std::uint64_t mask = w == 64 ? ~0ull : ((1ull << w) - 1);
  std::uint64_t vals[4];
  for (unsigned i = 0; i < in.vec; ++i) vals[i] = (a >> (i * w)) & mask;
  for (unsigned i = 0; i < in.vec; ++i) t.r[in.d[i]] = vals[i];
}
void pack_op(ThreadState& t, const Instr& in) {
  unsigned w = static_cast<unsigned>(in.imm);
  std::uint64_t mask = w == 64 ? ~0ull : ((1ull << w) - 1);
  std::uint64_t r = 0;
  for (unsigned i = 0; i < in.vec; ++i) r |= (t.r[in.s[i]] & mask) << (i * w);
  t.r[in.d[0]] = r;
}

std::uint64_t window(Space s) {
  switch (s) {
    case Space::shared:
      return kSharedWindow;
    case Space::local:
      return kLocalWindow;
    case Space::param:
      return kParamWindow;
    case Space::const_:
      return kConstWindow;
    default:
      return 0;
  }
}
// cvta: in.imm = window, mod = 1 for .to (generic -> space), mod2 = 1 for .u32.
void cvta_op(ThreadState& t, const Instr& in) {
  std::uint64_t a = t.r[in.s[0]] + static_cast<std::uint64_t>(in.aux);
  std::uint64_t w = static_cast<std::uint64_t>(in.imm);
  std::uint64_t r = in.mod ? a - w : a + w;
  t.r[in.d[0]] = in.mod2 ? std::uint32_t(r) : r;
}
void isspacep_op(ThreadState& t, const Instr& in) {
  std::uint64_t a = t.r[in.s[0]];
  std::uint64_t w = static_cast<std::uint64_t>(in.imm);
  bool r = w == 0 ? (a < kSharedWindow) : (a >= w && a < w + kWindowSize);
  t.r[in.d[0]] = r;
}

// ---- cvt ----

inline std::int64_t int_source(const ThreadState& t, const Instr& in) {
  std::uint64_t v = t.r[in.s[0]];
  int bits = 8 * type_bytes(in.type2);
  if (bits < 64) {
    v &= (1ull << bits) - 1;
    if (is_signed(in.type2) && (v >> (bits - 1)) & 1) v |= ~0ull << bits;
  }
  return static_cast<std::int64_t>(v);
}

// Integer to integer without .sat: extend by the source type, then wrap to the destination
// type (in.imm = its bits; in.mod2 = 1 when signed) and extend to the register.
void cvt_int_int(ThreadState& t, const Instr& in) {
  auto v = static_cast<std::uint64_t>(int_source(t, in));
  unsigned bits = static_cast<unsigned>(in.imm);
  if (bits < 64) {
    v &= (1ull << bits) - 1;
    if (in.mod2 && (v >> (bits - 1)) & 1) v |= ~0ull << bits;
  }
  t.r[in.d[0]] = v;
}

FloatFormat format_of(Type t) {
  switch (t) {
    case Type::f16:
      return FloatFormat::f16;
    case Type::bf16:
      return FloatFormat::bf16;
    case Type::f64:
      return FloatFormat::f64;
    default:
      return FloatFormat::f32;
  }
}

long double flush_value(long double v, Type t) {
  if (t != Type::f32) return v;
  float f = static_cast<float>(v);
  return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.0L, v) : v;
}

// Everything else: source as long double (exact for all inputs), rounded once.
void cvt_generic(ThreadState& t, const Instr& in) {
  Type dt = in.type, st = in.type2;
  Round mode = static_cast<Round>(in.mod);
  bool ftz = in.flags & kFlagFtz, sat = in.flags & kFlagSat;
  long double v;
  bool src_float = is_float(st);
  if (src_float) {
    v = decode_float(format_of(st), t.r[in.s[0]]);
    if (ftz) v = flush_value(v, st);
  } else if (is_signed(st)) {
    v = static_cast<long double>(int_source(t, in));
  } else {
    v = static_cast<long double>(
        static_cast<std::uint64_t>(int_source(t, in)) &
        (type_bytes(st) == 8 ? ~0ull : ((1ull << (8 * type_bytes(st))) - 1)));
  }
  if (is_float(dt)) {
    if (src_float && type_bytes(dt) == type_bytes(st) && mode != Round::none)
      v = round_integral(v, mode);  // cvt.rni.f32.f32: round to an integral value
    if (sat) v = std::isnan(v) ? 0.0L : std::clamp(v, 0.0L, 1.0L);
    std::uint64_t bits = encode_float(format_of(dt), v, mode);
    if (ftz && dt == Type::f32 &&
        std::fpclassify(std::bit_cast<float>(std::uint32_t(bits))) == FP_SUBNORMAL)
      bits &= 0x80000000u;
    t.r[in.d[0]] = bits;
    return;
  }
  // Integer destination.
  int bits = 8 * type_bytes(dt);
  long double lo, hi;
  if (is_signed(dt)) {
    lo = -std::ldexp(1.0L, bits - 1);
    hi = std::ldexp(1.0L, bits - 1) - 1;
  } else {
    lo = 0;
    hi = std::ldexp(1.0L, bits) - 1;
  }
  if (src_float) {
    if (std::isnan(v)) {
      t.r[in.d[0]] = 0;
      return;
    }
    v = round_integral(v, mode == Round::none ? Round::rz : mode);
    v = std::clamp(v, lo, hi);  // float -> int always saturates
  } else if (sat) {
    v = std::clamp(v, lo, hi);
  }
  std::uint64_t r = is_signed(dt) || v < 0
                        ? static_cast<std::uint64_t>(static_cast<std::int64_t>(v))
                        : static_cast<std::uint64_t>(v);
  if (bits < 64 && !is_signed(dt)) r &= (1ull << bits) - 1;
  t.r[in.d[0]] = r;
}

// cvt.rn.f16x2.f32 d, a, b: a goes to the upper half.
void cvt_pack_x2(ThreadState& t, const Instr& in) {
  FloatFormat f = in.type == Type::bf16x2 ? FloatFormat::bf16 : FloatFormat::f16;
  Round mode = static_cast<Round>(in.mod);
  auto one = [&](std::uint32_t slot) {
    long double v = get<float>(t, slot);
    if (in.flags & kFlagSat) v = std::isnan(v) ? 0.0L : std::clamp(v, 0.0L, 1.0L);
    return static_cast<std::uint32_t>(encode_float(f, v, mode));
  };
  put<std::uint32_t>(t, in.d[0], (one(in.s[0]) << 16) | one(in.s[1]));
}

// Fast paths for the conversions every kernel has.
void cvt_f32_s32(ThreadState& t, const Instr& in) {
  put<float>(t, in.d[0], static_cast<float>(get<std::int32_t>(t, in.s[0])));
}
void cvt_f32_u32(ThreadState& t, const Instr& in) {
  put<float>(t, in.d[0], static_cast<float>(get<std::uint32_t>(t, in.s[0])));
}
void cvt_f64_f32(ThreadState& t, const Instr& in) {
  put<double>(t, in.d[0], static_cast<double>(get<float>(t, in.s[0])));
}
void cvt_f32_f64(ThreadState& t, const Instr& in) {
  put<float>(t, in.d[0], static_cast<float>(get<double>(t, in.s[0])));
}
void cvt_f32_f16(ThreadState& t, const Instr& in) {
  put<float>(t, in.d[0], half_to_float(get<std::uint16_t>(t, in.s[0])));
}
void cvt_f32_bf16(ThreadState& t, const Instr& in) {
  put<float>(t, in.d[0], bf16_to_float(get<std::uint16_t>(t, in.s[0])));
}
void cvt_bf16_f32(ThreadState& t, const Instr& in) {
  put<std::uint16_t>(t, in.d[0], float_to_bf16_rn(get<float>(t, in.s[0])));
}
// f32 -> tf32 (PTX ISA cvt: .rna on sm_80, .rn / .rz on sm_90): the f32 rounded to 10
// significand bits, its low 13 bits zero. Rounding a magnitude up past the largest finite value
// gives infinity, as the carry into the exponent does here; NaN stays a (quiet) NaN.
void cvt_tf32_f32(ThreadState& t, const Instr& in) {
  std::uint32_t bits = get<std::uint32_t>(t, in.s[0]);
  if ((bits & 0x7f800000u) == 0x7f800000u) {
    if (bits & 0x7fffffu) bits |= 0x400000u;
    put<std::uint32_t>(t, in.d[0], bits & 0xffffe000u);
    return;
  }
  switch (static_cast<Round>(in.mod)) {
    case Round::rna:
      bits += 0x1000u;  // half an ulp of tf32: ties away from zero
      break;
    case Round::rn:
      bits += 0xfffu + ((bits >> 13) & 1u);  // ties to even
      break;
    default:  // rz
      break;
  }
  put<std::uint32_t>(t, in.d[0], bits & 0xffffe000u);
}
void cvt_s32_f32_rz(ThreadState& t, const Instr& in) {
  float f = get<float>(t, in.s[0]);
  std::int32_t r = std::isnan(f)         ? 0
                   : f >= 2147483648.0f  ? INT32_MAX
                   : f <= -2147483648.0f ? INT32_MIN
                                         : static_cast<std::int32_t>(f);
  put<std::int32_t>(t, in.d[0], r);
}

}  // namespace

void add_convert_decoders(DecoderTable& table) {
  table["mov"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    in.type = info.type();
    const ast::Operand& d = c.op(0);
    const ast::Operand& a = c.op(1);
    int bits = 8 * type_bytes(in.type);
    if (d.kind == ast::Operand::kVec) {
      in.fn = unpack_op;
      in.vec = static_cast<std::uint8_t>(d.elems.size());
      if (in.vec < 2 || in.vec > 4) c.fail("bad vector size");
      in.imm = bits / in.vec;
      for (std::size_t i = 0; i < d.elems.size(); ++i) in.d[i] = c.dst(d.elems[i]);
      in.s[0] = c.src(a, in.type);
      return;
    }
    in.d[0] = c.dst(d);
    if (a.kind == ast::Operand::kVec) {
      in.fn = pack_op;
      in.vec = static_cast<std::uint8_t>(a.elems.size());
      if (in.vec < 2 || in.vec > 4) c.fail("bad vector size");
      in.imm = bits / in.vec;
      Type et = in.imm == 8    ? Type::b8
                : in.imm == 16 ? Type::b16
                : in.imm == 32 ? Type::b32
                               : Type::b64;
      for (std::size_t i = 0; i < a.elems.size(); ++i) in.s[i] = c.src(a.elems[i], et);
      return;
    }
    if (int k = c.dynamic_special(a)) {
      in.fn = mov_clock;
      in.mod = static_cast<std::uint8_t>(k);
      return;
    }
    SymAddr sa;
    if (c.symbol(a, sa)) {
      in.fn = mov_addr;
      in.addr = sa.base;
      in.imm = sa.offset;
      return;
    }
    in.fn = mov_op;
    in.s[0] = c.src(a, in.type);
  };
  auto cvta = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    in.mod = info.take("to") ? 1 : 0;
    int sp = info.take_one({"global", "shared", "local", "param", "const"});
    if (sp < 0) c.fail("missing state space");
    Space space = static_cast<Space>(sp + 1);
    in.imm = static_cast<std::int64_t>(window(space));
    in.mod2 = info.type() == Type::u32 ? 1 : 0;
    in.fn = cvta_op;
    in.d[0] = c.dst(c.op(0));
    SymAddr sa;
    if (c.symbol(c.op(1), sa)) {
      if (sa.base != kSlotZero) {
        in.s[0] = sa.base;
        in.aux = static_cast<std::uint32_t>(sa.offset);
      } else {
        ast::Operand imm;
        imm.kind = ast::Operand::kImm;
        imm.text = std::to_string(sa.offset);
        in.s[0] = c.src(imm, Type::u64);
      }
      return;
    }
    in.s[0] = c.src(c.op(1), Type::u64);
  };
  table["cvta"] = cvta;
  table["isspacep"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    int sp = info.take_one({"global", "shared", "local", "param", "const"});
    if (sp < 0) c.fail("missing state space");
    info.take("cta");
    in.imm = static_cast<std::int64_t>(window(static_cast<Space>(sp + 1)));
    in.fn = isspacep_op;
    in.d[0] = c.dst(c.op(0));
    in.s[0] = c.src(c.op(1), Type::u64);
  };
  table["cvt"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    in.type = info.type(0);
    in.type2 = info.type(1);
    if (in.type == Type::none || in.type2 == Type::none) c.fail("cvt needs two types");
    in.mod = take_rounding(info);
    if (info.take("ftz")) in.flags |= kFlagFtz;
    if (info.take("sat")) in.flags |= kFlagSat;
    in.d[0] = c.dst(c.op(0));
    in.s[0] = c.src(c.op(1), in.type2);
    Type dt = in.type, st = in.type2;
    if (dt == Type::tf32) {
      Round mode = static_cast<Round>(in.mod);
      if (st != Type::f32 || (mode != Round::rna && mode != Round::rn && mode != Round::rz) ||
          (in.flags & (kFlagFtz | kFlagSat)))
        c.fail("only cvt.rna.tf32.f32, cvt.rn.tf32.f32 and cvt.rz.tf32.f32 are implemented");
      in.fn = cvt_tf32_f32;
      return;
    }
    if (dt == Type::f16x2 || dt == Type::bf16x2) {
      if (st != Type::f32) c.fail("packed cvt needs .f32 sources");
      in.s[1] = c.src(c.op(2), st);
      in.fn = cvt_pack_x2;
      return;
    }
    if (dt == Type::pred || st == Type::pred || type_bytes(dt) > 8 || type_bytes(st) > 8 ||
        dt == Type::f16x2 || st == Type::f16x2 || st == Type::bf16x2 || dt == Type::tf32 ||
        st == Type::tf32)
      c.fail("conversion not supported");
    bool plain = !(in.flags & (kFlagFtz | kFlagSat));
    Round mode = static_cast<Round>(in.mod);
    bool rn = mode == Round::none || mode == Round::rn;
    if (!is_float(dt) && !is_float(st)) {
      in.imm = 8 * type_bytes(dt);
      in.mod2 = is_signed(dt) ? 1 : 0;
      in.fn = plain ? cvt_int_int : cvt_generic;
      return;
    }
    in.fn = cvt_generic;
    if (!plain) return;
    if (dt == Type::f32 && st == Type::s32 && rn)
      in.fn = cvt_f32_s32;
    else if (dt == Type::f32 && st == Type::u32 && rn)
      in.fn = cvt_f32_u32;
    else if (dt == Type::f64 && st == Type::f32)
      in.fn = cvt_f64_f32;
    else if (dt == Type::f32 && st == Type::f64 && rn)
      in.fn = cvt_f32_f64;
    else if (dt == Type::f32 && st == Type::f16)
      in.fn = cvt_f32_f16;
    else if (dt == Type::f32 && st == Type::bf16)
      in.fn = cvt_f32_bf16;
    else if (dt == Type::bf16 && st == Type::f32 && rn)
      in.fn = cvt_bf16_f32;
    else if (dt == Type::s32 && st == Type::f32 && mode == Round::rz)
      in.fn = cvt_s32_f32_rz;
  };
}

}  // namespace kiln::cuda::vgpu
