// Integer arithmetic and logic: add sub (with carry chains) mul mad (lo/hi/wide, carry) div rem
// abs neg min max sad mul24 and or xor not cnot shl shr (bit-field instructions: ops_bits.cpp).
#include <bit>
#include <limits>

#include "runtime/cuda/virtual/ops_util.h"

namespace kiln::cuda::vgpu {
namespace {

template <class T>
using U = Unsigned<T>;

template <class T, T (*F)(T, T)>
void bin(ThreadState& t, const Instr& in) {
  put<T>(t, in.d[0], F(get<T>(t, in.s[0]), get<T>(t, in.s[1])));
}

template <class T>
T op_add(T a, T b) {
  return static_cast<T>(U<T>(a) + U<T>(b));
}
template <class T>
T op_sub(T a, T b) {
  return static_cast<T>(U<T>(a) - U<T>(b));
}
template <class T>
T op_mul(T a, T b) {
  if constexpr (sizeof(T) < sizeof(unsigned))
    return static_cast<T>(unsigned(U<T>(a)) * unsigned(U<T>(b)));
  else
    return static_cast<T>(U<T>(a) * U<T>(b));
}
template <class T>
T op_mulhi(T a, T b) {
  if constexpr (sizeof(T) == 8) {
    using W = std::conditional_t<std::is_signed_v<T>, __int128, unsigned __int128>;
    return static_cast<T>((W(a) * W(b)) >> 64);
  } else {
    using W = std::conditional_t<std::is_signed_v<T>, std::int64_t, std::uint64_t>;
    return static_cast<T>((W(a) * W(b)) >> (8 * sizeof(T)));
  }
}
template <class T>
T op_min(T a, T b) {
  return a < b ? a : b;
}
template <class T>
T op_max(T a, T b) {
  return a > b ? a : b;
}
template <class T>
T op_and(T a, T b) {
  return a & b;
}
template <class T>
T op_or(T a, T b) {
  return a | b;
}
template <class T>
T op_xor(T a, T b) {
  return a ^ b;
}
template <class T>
T op_div(T a, T b) {
  if (b == 0) return static_cast<T>(~U<T>(0));  // hardware gives all ones
  if constexpr (std::is_signed_v<T>)
    if (a == std::numeric_limits<T>::min() && b == -1) return a;
  return static_cast<T>(a / b);
}
template <class T>
T op_rem(T a, T b) {
  if (b == 0) return a;
  if constexpr (std::is_signed_v<T>)
    if (b == -1) return 0;
  return static_cast<T>(a % b);
}

template <class T>
struct Add {
  static constexpr Handler run = bin<T, op_add<T>>;
};
template <class T>
struct Sub {
  static constexpr Handler run = bin<T, op_sub<T>>;
};
template <class T>
struct MulLo {
  static constexpr Handler run = bin<T, op_mul<T>>;
};
template <class T>
struct MulHi {
  static constexpr Handler run = bin<T, op_mulhi<T>>;
};
template <class T>
struct Min {
  static constexpr Handler run = bin<T, op_min<T>>;
};
template <class T>
struct Max {
  static constexpr Handler run = bin<T, op_max<T>>;
};
template <class T>
struct And {
  static constexpr Handler run = bin<T, op_and<T>>;
};
template <class T>
struct Or {
  static constexpr Handler run = bin<T, op_or<T>>;
};
template <class T>
struct Xor {
  static constexpr Handler run = bin<T, op_xor<T>>;
};
template <class T>
struct Div {
  static constexpr Handler run = bin<T, op_div<T>>;
};
template <class T>
struct Rem {
  static constexpr Handler run = bin<T, op_rem<T>>;
};

void add_sat_s32(ThreadState& t, const Instr& in) {
  std::int64_t r = std::int64_t(get<std::int32_t>(t, in.s[0])) + get<std::int32_t>(t, in.s[1]);
  if (in.mod) r = std::int64_t(get<std::int32_t>(t, in.s[0])) - get<std::int32_t>(t, in.s[1]);
  r = std::clamp<std::int64_t>(r, INT32_MIN, INT32_MAX);
  put<std::int32_t>(t, in.d[0], static_cast<std::int32_t>(r));
}

// add.cc / addc{.cc} / sub.cc / subc{.cc}: mod bit0 = sub, bit1 = uses carry-in, bit2 = sets cc.
template <class T>
void carry_op(ThreadState& t, const Instr& in) {
  using W = std::conditional_t<sizeof(T) == 8, unsigned __int128, std::uint64_t>;
  W a = U<T>(get<T>(t, in.s[0])), b = U<T>(get<T>(t, in.s[1]));
  W cin = (in.mod & 2) ? (t.carry ? 1 : 0) : 0;
  W r;
  bool cout;
  if (in.mod & 1) {
    // PTX: subc computes a - (b + CC.CF); for subtraction CC.CF holds the borrow.
    W sub = b + cin;
    r = a - sub;
    cout = a < sub;
  } else {
    r = a + b + cin;
    cout = (r >> (8 * sizeof(T))) != 0;
  }
  if (in.mod & 4) t.carry = cout;
  put<T>(t, in.d[0], static_cast<T>(r));
}
template <class T>
struct Carry {
  static constexpr Handler run = carry_op<T>;
};

template <class T>
void mul_wide(ThreadState& t, const Instr& in) {
  using W = std::conditional_t<std::is_signed_v<T>,
                               std::conditional_t<sizeof(T) == 4, std::int64_t, std::int32_t>,
                               std::conditional_t<sizeof(T) == 4, std::uint64_t, std::uint32_t>>;
  put<W>(t, in.d[0], static_cast<W>(W(get<T>(t, in.s[0])) * W(get<T>(t, in.s[1]))));
}
template <class T>
void mad_wide(ThreadState& t, const Instr& in) {
  using W = std::conditional_t<std::is_signed_v<T>,
                               std::conditional_t<sizeof(T) == 4, std::int64_t, std::int32_t>,
                               std::conditional_t<sizeof(T) == 4, std::uint64_t, std::uint32_t>>;
  using UW = std::make_unsigned_t<W>;
  UW p = UW(W(get<T>(t, in.s[0])) * W(get<T>(t, in.s[1])));
  put<W>(t, in.d[0], static_cast<W>(p + UW(get<W>(t, in.s[2]))));
}
template <class T>
struct MulWide {
  static constexpr Handler run = mul_wide<T>;
};
template <class T>
struct MadWide {
  static constexpr Handler run = mad_wide<T>;
};

template <class T>
void mad_lo(ThreadState& t, const Instr& in) {
  T p = op_mul<T>(get<T>(t, in.s[0]), get<T>(t, in.s[1]));
  put<T>(t, in.d[0], op_add<T>(p, get<T>(t, in.s[2])));
}
template <class T>
void mad_hi(ThreadState& t, const Instr& in) {
  T p = op_mulhi<T>(get<T>(t, in.s[0]), get<T>(t, in.s[1]));
  put<T>(t, in.d[0], op_add<T>(p, get<T>(t, in.s[2])));
}
template <class T>
struct MadLo {
  static constexpr Handler run = mad_lo<T>;
};

// mad{.lo,.hi}.cc / madc{.lo,.hi}{.cc}: mod bit0 = hi, bit1 = carry-in, bit2 = sets CC.CF.
template <class T>
void mad_carry(ThreadState& t, const Instr& in) {
  using W = std::conditional_t<sizeof(T) == 8, unsigned __int128, std::uint64_t>;
  T a = get<T>(t, in.s[0]), b = get<T>(t, in.s[1]);
  T p = (in.mod & 1) ? op_mulhi<T>(a, b) : op_mul<T>(a, b);
  W r = W(U<T>(p)) + W(U<T>(get<T>(t, in.s[2]))) + ((in.mod & 2) && t.carry ? 1 : 0);
  if (in.mod & 4) t.carry = (r >> (8 * sizeof(T))) != 0;
  put<T>(t, in.d[0], static_cast<T>(r));
}
template <class T>
struct MadCarry {
  static constexpr Handler run = mad_carry<T>;
};
template <class T>
struct MadHi {
  static constexpr Handler run = mad_hi<T>;
};

template <class T>
void sad_op(ThreadState& t, const Instr& in) {
  T a = get<T>(t, in.s[0]), b = get<T>(t, in.s[1]);
  T diff = a < b ? op_sub<T>(b, a) : op_sub<T>(a, b);
  put<T>(t, in.d[0], op_add<T>(get<T>(t, in.s[2]), diff));
}
template <class T>
struct Sad {
  static constexpr Handler run = sad_op<T>;
};

template <class T>
void abs_op(ThreadState& t, const Instr& in) {
  T a = get<T>(t, in.s[0]);
  put<T>(t, in.d[0], a < 0 ? static_cast<T>(U<T>(0) - U<T>(a)) : a);
}
template <class T>
void neg_op(ThreadState& t, const Instr& in) {
  put<T>(t, in.d[0], static_cast<T>(U<T>(0) - U<T>(get<T>(t, in.s[0]))));
}
template <class T>
void not_op(ThreadState& t, const Instr& in) {
  put<T>(t, in.d[0], static_cast<T>(~get<T>(t, in.s[0])));
}
template <class T>
void cnot_op(ThreadState& t, const Instr& in) {
  put<T>(t, in.d[0], static_cast<T>(get<T>(t, in.s[0]) == 0 ? 1 : 0));
}
template <class T>
struct Abs {
  static constexpr Handler run = abs_op<T>;
};
template <class T>
struct Neg {
  static constexpr Handler run = neg_op<T>;
};
template <class T>
struct Not {
  static constexpr Handler run = not_op<T>;
};
template <class T>
struct CNot {
  static constexpr Handler run = cnot_op<T>;
};

void not_pred(ThreadState& t, const Instr& in) {
  t.r[in.d[0]] = t.r[in.s[0]] ? 0 : 1;
}
void and_pred(ThreadState& t, const Instr& in) {
  t.r[in.d[0]] = (get_pred(t, in, 0) && get_pred(t, in, 1)) ? 1 : 0;
}
void or_pred(ThreadState& t, const Instr& in) {
  t.r[in.d[0]] = (get_pred(t, in, 0) || get_pred(t, in, 1)) ? 1 : 0;
}
void xor_pred(ThreadState& t, const Instr& in) {
  t.r[in.d[0]] = (get_pred(t, in, 0) != get_pred(t, in, 1)) ? 1 : 0;
}

template <class T>
void shl_op(ThreadState& t, const Instr& in) {
  std::uint32_t n = get<std::uint32_t>(t, in.s[1]);
  U<T> a = U<T>(get<T>(t, in.s[0]));
  put<T>(t, in.d[0], n >= 8 * sizeof(T) ? T(0) : static_cast<T>(U<T>(a << n)));
}
template <class T>
void shr_op(ThreadState& t, const Instr& in) {
  std::uint32_t n = get<std::uint32_t>(t, in.s[1]);
  T a = get<T>(t, in.s[0]);
  if (n >= 8 * sizeof(T))
    n = 8 * sizeof(T) - 1, a = std::is_signed_v<T> ? (a >> n) : T(0);
  else
    a = static_cast<T>(a >> n);
  put<T>(t, in.d[0], a);
}
template <class T>
struct Shl {
  static constexpr Handler run = shl_op<T>;
};
template <class T>
struct Shr {
  static constexpr Handler run = shr_op<T>;
};

void mul24_lo(ThreadState& t, const Instr& in) {
  std::int64_t a = std::int32_t(get<std::uint32_t>(t, in.s[0]) << 8) >> 8;
  std::int64_t b = std::int32_t(get<std::uint32_t>(t, in.s[1]) << 8) >> 8;
  std::uint32_t r = std::uint32_t(a * b);
  if (in.mod) r += get<std::uint32_t>(t, in.s[2]);
  put<std::uint32_t>(t, in.d[0], r);
}

}  // namespace

void add_int_decoders(DecoderTable& table) {
  auto simple = [](auto pick) {
    return [pick](DecodeCtx& c, OpcodeParts& info, Instr& in) {
      in.type = info.type();
      in.fn = pick(c, in.type);
      decode_dst_srcs(c, in, in.type, static_cast<int>(c.nops()) - 1);
    };
  };
  // add / sub: integer forms here; float forms are routed to the float family.
  auto add_sub = [](bool sub) {
    return [sub](DecodeCtx& c, OpcodeParts& info, Instr& in) {
      in.type = info.type();
      bool cc = info.take("cc");
      if (info.take("sat")) {
        if (in.type != Type::s32) c.fail("only .s32 saturates");
        in.fn = add_sat_s32;
        in.mod = sub;
      } else if (cc) {
        in.mod = static_cast<std::uint8_t>((sub ? 1 : 0) | 4);
        in.fn = int_handler<Carry>(c, in.type, false);
      } else {
        in.fn = sub ? int_handler<Sub>(c, in.type) : int_handler<Add>(c, in.type);
      }
      decode_dst_srcs(c, in, in.type, 2);
    };
  };
  table["add"] = add_sub(false);
  table["sub"] = add_sub(true);
  auto with_carry = [](bool sub) {
    return [sub](DecodeCtx& c, OpcodeParts& info, Instr& in) {
      in.type = info.type();
      in.mod = static_cast<std::uint8_t>((sub ? 1 : 0) | 2 | (info.take("cc") ? 4 : 0));
      in.fn = int_handler<Carry>(c, in.type, false);
      decode_dst_srcs(c, in, in.type, 2);
    };
  };
  table["addc"] = with_carry(false);
  table["subc"] = with_carry(true);
  table["mul"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    in.type = info.type();
    int mode = info.take_one({"lo", "hi", "wide"});
    if (mode == 2) {
      in.fn = int_handler<MulWide>(c, in.type);
      if (type_bytes(in.type) == 8) c.fail(".wide needs a 16- or 32-bit type");
    } else {
      in.fn = mode == 1 ? int_handler<MulHi>(c, in.type) : int_handler<MulLo>(c, in.type);
    }
    decode_dst_srcs(c, in, in.type, 2);
  };
  table["mad"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    in.type = info.type();
    int mode = info.take_one({"lo", "hi", "wide"});
    if (info.take("cc")) {
      if (mode == 2) c.fail("mad.wide.cc is not defined");
      in.mod = static_cast<std::uint8_t>((mode == 1 ? 1 : 0) | 4);
      in.fn = int_handler<MadCarry>(c, in.type, false);
      decode_dst_srcs(c, in, in.type, 3);
      return;
    }
    if (info.has("sat")) c.fail("mad.hi.sat not implemented");
    if (mode == 2) {
      if (type_bytes(in.type) == 8) c.fail(".wide needs a 16- or 32-bit type");
      in.fn = int_handler<MadWide>(c, in.type);
      in.d[0] = c.dst(c.op(0));
      in.s[0] = c.src(c.op(1), in.type);
      in.s[1] = c.src(c.op(2), in.type);
      Type wide = in.type == Type::s32       ? Type::s64
                  : in.type == Type::s16     ? Type::s32
                  : type_bytes(in.type) == 4 ? Type::u64
                                             : Type::u32;
      in.s[2] = c.src(c.op(3), wide);
      return;
    }
    in.fn = mode == 1 ? int_handler<MadHi>(c, in.type) : int_handler<MadLo>(c, in.type);
    decode_dst_srcs(c, in, in.type, 3);
  };
  table["madc"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    in.type = info.type();
    int mode = info.take_one({"lo", "hi"});
    in.mod = static_cast<std::uint8_t>((mode == 1 ? 1 : 0) | 2 | (info.take("cc") ? 4 : 0));
    in.fn = int_handler<MadCarry>(c, in.type, false);
    decode_dst_srcs(c, in, in.type, 3);
  };
  table["mul24"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    if (!info.take("lo")) c.fail("only mul24.lo is implemented");
    in.fn = mul24_lo;
    decode_dst_srcs(c, in, info.type(), 2);
  };
  table["mad24"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    if (!info.take("lo")) c.fail("only mad24.lo is implemented");
    in.fn = mul24_lo;
    in.mod = 1;
    decode_dst_srcs(c, in, info.type(), 3);
  };
  table["sad"] = simple([](DecodeCtx& c, Type t) { return int_handler<Sad>(c, t); });
  table["div"] = simple([](DecodeCtx& c, Type t) { return int_handler<Div>(c, t); });
  table["rem"] = simple([](DecodeCtx& c, Type t) { return int_handler<Rem>(c, t); });
  table["abs"] = simple([](DecodeCtx& c, Type t) { return int_handler<Abs>(c, t); });
  table["neg"] = simple([](DecodeCtx& c, Type t) { return int_handler<Neg>(c, t); });
  table["min"] = simple([](DecodeCtx& c, Type t) { return int_handler<Min>(c, t); });
  table["max"] = simple([](DecodeCtx& c, Type t) { return int_handler<Max>(c, t); });
  table["cnot"] = simple([](DecodeCtx& c, Type t) { return int_handler<CNot>(c, t); });
  auto logic = [](Handler pred, auto pick) {
    return [pred, pick](DecodeCtx& c, OpcodeParts& info, Instr& in) {
      in.type = info.type();
      in.d[0] = c.dst(c.op(0));
      if (in.type == Type::pred) {
        in.fn = pred;
        for (std::size_t i = 1; i < c.nops(); ++i)
          in.s[i - 1] = c.pred_src(c.op(i), in, static_cast<int>(i - 1));
        return;
      }
      in.fn = pick(c, in.type);
      for (std::size_t i = 1; i < c.nops(); ++i) in.s[i - 1] = c.src(c.op(i), in.type);
    };
  };
  table["and"] = logic(and_pred, [](DecodeCtx& c, Type t) { return int_handler<And>(c, t); });
  table["or"] = logic(or_pred, [](DecodeCtx& c, Type t) { return int_handler<Or>(c, t); });
  table["xor"] = logic(xor_pred, [](DecodeCtx& c, Type t) { return int_handler<Xor>(c, t); });
  table["not"] = logic(not_pred, [](DecodeCtx& c, Type t) { return int_handler<Not>(c, t); });
  auto shift = [](bool left) {
    return [left](DecodeCtx& c, OpcodeParts& info, Instr& in) {
      in.type = info.type();
      in.fn = left ? int_handler<Shl>(c, in.type) : int_handler<Shr>(c, in.type);
      in.d[0] = c.dst(c.op(0));
      in.s[0] = c.src(c.op(1), in.type);
      in.s[1] = c.src(c.op(2), Type::u32);
    };
  };
  table["shl"] = shift(true);
  table["shr"] = shift(false);
}

}  // namespace kiln::cuda::vgpu
