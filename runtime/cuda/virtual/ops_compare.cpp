// Comparisons and selection: setp, set, selp, slct (integer, f16/bf16, f32, f64 operands).
#include <cmath>

#include "runtime/cuda/virtual/float_format.h"
#include "runtime/cuda/virtual/ops_util.h"

namespace kiln::cuda::vgpu {
namespace {

enum Cmp : std::uint8_t {
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kEqu,
  kNeu,
  kLtu,
  kLeu,
  kGtu,
  kGeu,
  kNum,
  kNan
};
struct Half16 {};  // marks f16 / bf16 operands (the instruction's type says which)

enum BoolOp : std::uint8_t { kNone, kAnd, kOr, kXor };

template <class T>
inline bool compare(std::uint8_t op, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    bool unordered = std::isnan(a) || std::isnan(b);
    switch (op) {
      case kEq:
        return !unordered && a == b;
      case kNe:
        return !unordered && a != b;
      case kLt:
        return !unordered && a < b;
      case kLe:
        return !unordered && a <= b;
      case kGt:
        return !unordered && a > b;
      case kGe:
        return !unordered && a >= b;
      case kEqu:
        return unordered || a == b;
      case kNeu:
        return unordered || a != b;
      case kLtu:
        return unordered || a < b;
      case kLeu:
        return unordered || a <= b;
      case kGtu:
        return unordered || a > b;
      case kGeu:
        return unordered || a >= b;
      case kNum:
        return !unordered;
      case kNan:
        return unordered;
    }
    return false;
  } else {
    switch (op) {
      case kEq:
        return a == b;
      case kNe:
        return a != b;
      case kLt:
        return a < b;
      case kLe:
        return a <= b;
      case kGt:
        return a > b;
      case kGe:
        return a >= b;
    }
    return false;
  }
}

inline float ftz(float x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
}

template <class T>
inline bool operands_compare(const ThreadState& t, const Instr& in) {
  if constexpr (std::is_same_v<T, float>) {
    float a = get<float>(t, in.s[0]), b = get<float>(t, in.s[1]);
    if (in.flags & kFlagFtz) a = ftz(a), b = ftz(b);
    return compare(in.mod, a, b);
  } else if constexpr (std::is_same_v<T, Half16>) {  // f16 / bf16 operands
    auto conv = in.type == Type::bf16 ? bf16_to_float : half_to_float;
    return compare(in.mod, conv(get<std::uint16_t>(t, in.s[0])),
                   conv(get<std::uint16_t>(t, in.s[1])));
  } else {
    return compare(in.mod, get<T>(t, in.s[0]), get<T>(t, in.s[1]));
  }
}

inline bool combine(const ThreadState& t, const Instr& in, bool r) {
  switch (in.mod2) {
    case kAnd:
      return r && get_pred(t, in, 2);
    case kOr:
      return r || get_pred(t, in, 2);
    case kXor:
      return r != get_pred(t, in, 2);
  }
  return r;
}

template <class T>
void setp_op(ThreadState& t, const Instr& in) {
  bool r = operands_compare<T>(t, in);
  if (in.mod2 == kNone) {
    t.r[in.d[0]] = r;
    t.r[in.d[1]] = !r;
    return;
  }
  t.r[in.d[0]] = combine(t, in, r);
  t.r[in.d[1]] = combine(t, in, !r);
}

// set: the result is 1.0 / 0.0 for float destinations, all ones / zero for integers.
template <class T>
void set_op(ThreadState& t, const Instr& in) {
  bool r = combine(t, in, operands_compare<T>(t, in));
  std::uint64_t v;
  switch (in.type2) {
    case Type::f32:
      v = r ? 0x3f800000u : 0;
      break;
    case Type::f16:
      v = r ? 0x3c00u : 0;
      break;
    case Type::bf16:
      v = r ? 0x3f80u : 0;
      break;
    default:
      v = r ? 0xffffffffu : 0;
      break;
  }
  t.r[in.d[0]] = v;
}

template <class T>
struct Setp {
  static constexpr Handler run = setp_op<T>;
};

// The common case, setp.<cmp>.<type> p, a, b without a combiner: one handler per comparison.
template <class T, std::uint8_t Op>
void setp_fixed(ThreadState& t, const Instr& in) {
  bool r = compare(Op, get<T>(t, in.s[0]), get<T>(t, in.s[1]));
  t.r[in.d[0]] = r;
  t.r[in.d[1]] = !r;
}

template <class T>
Handler setp_fixed_for(std::uint8_t op) {
  switch (op) {
    case kEq:
      return setp_fixed<T, kEq>;
    case kNe:
      return setp_fixed<T, kNe>;
    case kLt:
      return setp_fixed<T, kLt>;
    case kLe:
      return setp_fixed<T, kLe>;
    case kGt:
      return setp_fixed<T, kGt>;
    case kGe:
      return setp_fixed<T, kGe>;
  }
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case kEqu:
        return setp_fixed<T, kEqu>;
      case kNeu:
        return setp_fixed<T, kNeu>;
      case kLtu:
        return setp_fixed<T, kLtu>;
      case kLeu:
        return setp_fixed<T, kLeu>;
      case kGtu:
        return setp_fixed<T, kGtu>;
      case kGeu:
        return setp_fixed<T, kGeu>;
      case kNum:
        return setp_fixed<T, kNum>;
      case kNan:
        return setp_fixed<T, kNan>;
    }
  }
  return nullptr;
}

Handler fast_setp(Type t, std::uint8_t op) {
  switch (t) {
    case Type::s32:
      return setp_fixed_for<std::int32_t>(op);
    case Type::u32:
    case Type::b32:
      return setp_fixed_for<std::uint32_t>(op);
    case Type::s64:
      return setp_fixed_for<std::int64_t>(op);
    case Type::u64:
    case Type::b64:
      return setp_fixed_for<std::uint64_t>(op);
    case Type::f32:
      return setp_fixed_for<float>(op);
    case Type::f64:
      return setp_fixed_for<double>(op);
    default:
      return nullptr;
  }
}
template <class T>
struct Set {
  static constexpr Handler run = set_op<T>;
};

void selp_op(ThreadState& t, const Instr& in) {
  t.r[in.d[0]] = t.r[in.s[2]] ? t.r[in.s[0]] : t.r[in.s[1]];
}
void slct_s32(ThreadState& t, const Instr& in) {
  t.r[in.d[0]] = get<std::int32_t>(t, in.s[2]) >= 0 ? t.r[in.s[0]] : t.r[in.s[1]];
}
void slct_f32(ThreadState& t, const Instr& in) {
  float c = get<float>(t, in.s[2]);
  if (in.flags & kFlagFtz) c = ftz(c);
  t.r[in.d[0]] = c >= 0.0f ? t.r[in.s[0]] : t.r[in.s[1]];
}

template <template <class> class H>
Handler cmp_handler(DecodeCtx& c, Type t) {
  switch (t) {
    case Type::f32:
      return H<float>::run;
    case Type::f64:
      return H<double>::run;
    case Type::f16:
    case Type::bf16:
      return H<Half16>::run;
    default:
      return int_handler<H>(c, t);
  }
}

std::uint8_t take_cmp(DecodeCtx& c, OpcodeParts& info, Type t) {
  int op = info.take_one(
      {"eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"});
  if (op < 0) {
    int u = info.take_one({"lo", "ls", "hi", "hs"});
    if (u < 0) c.fail("missing comparison");
    op = kLt + u;
  }
  if (!is_float(t) && op > kGe) c.fail("unordered comparison on an integer type");
  return static_cast<std::uint8_t>(op);
}

}  // namespace

void add_compare_decoders(DecoderTable& table) {
  auto setp_like = [](bool is_set) {
    return [is_set](DecodeCtx& c, OpcodeParts& info, Instr& in) {
      Type src_type = is_set ? info.type(1) : info.type(0);
      if (src_type == Type::f16x2 || src_type == Type::bf16x2) c.fail("packed comparison");
      in.type = src_type;
      in.type2 = is_set ? info.type(0) : Type::none;
      in.mod = take_cmp(c, info, src_type);
      int b = info.take_one({"and", "or", "xor"});
      in.mod2 = static_cast<std::uint8_t>(b + 1);
      if (info.take("ftz")) in.flags |= kFlagFtz;
      in.fn = is_set ? cmp_handler<Set>(c, src_type) : cmp_handler<Setp>(c, src_type);
      if (!is_set && in.mod2 == kNone && !(in.flags & kFlagFtz))
        if (Handler h = fast_setp(src_type, in.mod)) in.fn = h;
      const ast::Operand& d = c.op(0);
      if (d.kind == ast::Operand::kPair) {
        in.d[0] = c.dst(d.elems[0]);
        in.d[1] = c.dst(d.elems[1]);
      } else {
        in.d[0] = c.dst(d);
      }
      in.s[0] = c.src(c.op(1), src_type);
      in.s[1] = c.src(c.op(2), src_type);
      if (in.mod2 != kNone) in.s[2] = c.pred_src(c.op(3), in, 2);
    };
  };
  table["setp"] = setp_like(false);
  table["set"] = setp_like(true);
  table["selp"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    in.type = info.type();
    in.fn = selp_op;
    decode_dst_srcs(c, in, in.type, 2);
    in.s[2] = c.src(c.op(3), Type::pred);
  };
  table["slct"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    in.type = info.type(0);
    Type ct = info.type(1);
    if (info.take("ftz")) in.flags |= kFlagFtz;
    if (ct == Type::s32)
      in.fn = slct_s32;
    else if (ct == Type::f32)
      in.fn = slct_f32;
    else
      c.fail("slct selector must be .s32 or .f32");
    decode_dst_srcs(c, in, in.type, 2);
    in.s[2] = c.src(c.op(3), ct);
  };
}

}  // namespace kiln::cuda::vgpu
