// Bit-field and byte instructions: shf lop3 prmt (all modes) bfe bfi popc clz brev bfind.
#include <bit>
#include <cstdlib>

#include "runtime/cuda/virtual/ops_util.h"

namespace kiln::cuda::vgpu {
namespace {

template <class T>
using U = Unsigned<T>;

// shf.{l,r}.{wrap,clamp}.b32: mod bit0 = right, bit1 = clamp.
void shf_op(ThreadState& t, const Instr& in) {
  std::uint64_t lo = get<std::uint32_t>(t, in.s[0]), hi = get<std::uint32_t>(t, in.s[1]);
  std::uint32_t n = get<std::uint32_t>(t, in.s[2]);
  n = (in.mod & 2) ? std::min<std::uint32_t>(n, 32) : (n & 31);
  std::uint64_t v = (hi << 32) | lo;
  std::uint32_t r = (in.mod & 1) ? std::uint32_t(v >> n) : std::uint32_t((v << n) >> 32);
  put<std::uint32_t>(t, in.d[0], r);
}

template <class T>
void lop3_op(ThreadState& t, const Instr& in) {
  T a = get<T>(t, in.s[0]), b = get<T>(t, in.s[1]), c = get<T>(t, in.s[2]);
  std::uint32_t lut = get<std::uint32_t>(t, in.s[3]) & 0xff;
  T r = 0;
  for (int i = 0; i < 8; ++i)
    if (lut >> i & 1) r |= T((i & 4) ? a : T(~a)) & T((i & 2) ? b : T(~b)) & T((i & 1) ? c : T(~c));
  put<T>(t, in.d[0], r);
}

void prmt_op(ThreadState& t, const Instr& in) {
  std::uint64_t tmp =
      (std::uint64_t(get<std::uint32_t>(t, in.s[1])) << 32) | get<std::uint32_t>(t, in.s[0]);
  std::uint32_t c = get<std::uint32_t>(t, in.s[2]);
  auto byte = [&](unsigned i) { return std::uint32_t(tmp >> (8 * (i & 7))) & 0xff; };
  std::uint32_t r = 0;
  unsigned s = c & 3;
  for (unsigned i = 0; i < 4; ++i) {
    std::uint32_t b = 0;
    switch (in.mod) {
      case 0: {
        unsigned sel = (c >> (4 * i)) & 0xf;
        b = byte(sel & 7);
        if (sel & 8) b = (b & 0x80) ? 0xff : 0;
        break;
      }
      case 1:
        b = byte(s + i);
        break;  // f4e
      case 2:
        b = byte(s - i);
        break;  // b4e
      case 3:
        b = byte(s);
        break;  // rc8
      case 4:
        b = byte(std::max(i, s));
        break;  // ecl
      case 5:
        b = byte(std::min(i, s));
        break;  // ecr
      case 6:
        b = byte(2 * (s & 1) + (i & 1));
        break;  // rc16
    }
    r |= b << (8 * i);
  }
  put<std::uint32_t>(t, in.d[0], r);
}

template <class T>
void bfe_op(ThreadState& t, const Instr& in) {
  constexpr unsigned msb = 8 * sizeof(T) - 1;
  U<T> a = U<T>(get<T>(t, in.s[0]));
  unsigned pos = get<std::uint32_t>(t, in.s[1]) & 0xff, len = get<std::uint32_t>(t, in.s[2]) & 0xff;
  bool sbit = false;
  if (std::is_signed_v<T> && len > 0) sbit = (a >> std::min(pos + len - 1, msb)) & 1;
  U<T> d = 0;
  for (unsigned i = 0; i <= msb; ++i) {
    bool bit = (i < len && pos + i <= msb) ? ((a >> (pos + i)) & 1) : sbit;
    if (bit) d |= U<T>(1) << i;
  }
  put<T>(t, in.d[0], static_cast<T>(d));
}
template <class T>
struct Bfe {
  static constexpr Handler run = bfe_op<T>;
};

template <class T>
void bfi_op(ThreadState& t, const Instr& in) {
  constexpr unsigned msb = 8 * sizeof(T) - 1;
  T a = get<T>(t, in.s[0]), f = get<T>(t, in.s[1]);
  unsigned pos = get<std::uint32_t>(t, in.s[2]) & 0xff, len = get<std::uint32_t>(t, in.s[3]) & 0xff;
  for (unsigned i = 0; i < len && pos + i <= msb; ++i) {
    T bit = T(1) << (pos + i);
    f = ((a >> i) & 1) ? T(f | bit) : T(f & ~bit);
  }
  put<T>(t, in.d[0], f);
}

template <class T>
void popc_op(ThreadState& t, const Instr& in) {
  put<std::uint32_t>(t, in.d[0], static_cast<std::uint32_t>(std::popcount(get<T>(t, in.s[0]))));
}
template <class T>
void clz_op(ThreadState& t, const Instr& in) {
  put<std::uint32_t>(t, in.d[0], static_cast<std::uint32_t>(std::countl_zero(get<T>(t, in.s[0]))));
}
template <class T>
void brev_op(ThreadState& t, const Instr& in) {
  T a = get<T>(t, in.s[0]), r = 0;
  for (unsigned i = 0; i < 8 * sizeof(T); ++i)
    if ((a >> i) & 1) r |= T(1) << (8 * sizeof(T) - 1 - i);
  put<T>(t, in.d[0], r);
}
template <class T>
void bfind_op(ThreadState& t, const Instr& in) {
  T a = get<T>(t, in.s[0]);
  U<T> u = U<T>(a);
  if (std::is_signed_v<T> && a < 0) u = U<T>(~u);
  std::uint32_t r = 0xffffffffu;
  if (u != 0) {
    r = 8 * sizeof(T) - 1 - static_cast<std::uint32_t>(std::countl_zero(u));
    if (in.mod) r = 8 * sizeof(T) - 1 - r;  // .shiftamt
  }
  put<std::uint32_t>(t, in.d[0], r);
}
template <class T>
struct Bfind {
  static constexpr Handler run = bfind_op<T>;
};

Handler bits_handler(DecodeCtx& c, Type t, Handler h32, Handler h64) {
  if (t == Type::b32 || t == Type::u32 || t == Type::s32) return h32;
  if (t == Type::b64 || t == Type::u64 || t == Type::s64) return h64;
  c.fail(fmt::format("type .{} not supported", type_name(t)));
}

// dp4a / dp2a: mod bit0 = a signed, bit1 = b signed; dp2a: bit2 = .hi (bytes 2,3 of b).
void dp4a_op(ThreadState& t, const Instr& in) {
  std::uint32_t a = get<std::uint32_t>(t, in.s[0]), b = get<std::uint32_t>(t, in.s[1]);
  std::int64_t acc = (in.mod & 3) ? std::int64_t(get<std::int32_t>(t, in.s[2]))
                                  : std::int64_t(get<std::uint32_t>(t, in.s[2]));
  for (int i = 0; i < 4; ++i) {
    std::int64_t x = (in.mod & 1) ? std::int8_t(a >> (8 * i)) : std::uint8_t(a >> (8 * i));
    std::int64_t y = (in.mod & 2) ? std::int8_t(b >> (8 * i)) : std::uint8_t(b >> (8 * i));
    acc += x * y;
  }
  put<std::uint32_t>(t, in.d[0], static_cast<std::uint32_t>(acc));
}
void dp2a_op(ThreadState& t, const Instr& in) {
  std::uint32_t a = get<std::uint32_t>(t, in.s[0]), b = get<std::uint32_t>(t, in.s[1]);
  std::int64_t acc = (in.mod & 3) ? std::int64_t(get<std::int32_t>(t, in.s[2]))
                                  : std::int64_t(get<std::uint32_t>(t, in.s[2]));
  int first = (in.mod & 4) ? 2 : 0;
  for (int i = 0; i < 2; ++i) {
    std::int64_t x = (in.mod & 1) ? std::int16_t(a >> (16 * i)) : std::uint16_t(a >> (16 * i));
    std::uint32_t byte = b >> (8 * (first + i));
    std::int64_t y = (in.mod & 2) ? std::int8_t(byte) : std::uint8_t(byte);
    acc += x * y;
  }
  put<std::uint32_t>(t, in.d[0], static_cast<std::uint32_t>(acc));
}
// fns.b32 d, mask, base, offset: the offset-th set bit of mask counting from base (upwards for
// positive offsets, downwards for negative), 0xffffffff if there is none.
void fns_op(ThreadState& t, const Instr& in) {
  std::uint32_t mask = get<std::uint32_t>(t, in.s[0]), base = get<std::uint32_t>(t, in.s[1]);
  std::int32_t offset = get<std::int32_t>(t, in.s[2]);
  std::uint32_t d = 0xffffffffu;
  if (offset == 0) {
    if (base < 32 && (mask >> base & 1)) d = base;
  } else {
    std::int64_t pos = base, count = std::llabs(std::int64_t(offset)) - 1;
    int inc = offset > 0 ? 1 : -1;
    for (; pos >= 0 && pos < 32; pos += inc)
      if (mask >> pos & 1) {
        if (count == 0) {
          d = static_cast<std::uint32_t>(pos);
          break;
        }
        --count;
      }
  }
  put<std::uint32_t>(t, in.d[0], d);
}

}  // namespace

void add_bits_decoders(DecoderTable& table) {
  auto dot = [](Handler h, bool two) {
    return [h, two](DecodeCtx& c, OpcodeParts& info, Instr& in) {
      int half = two ? info.take_one({"lo", "hi"}) : 0;
      if (half < 0) c.fail("dp2a needs .lo or .hi");
      in.mod = static_cast<std::uint8_t>((info.type(0) == Type::s32 ? 1 : 0) |
                                         (info.type(1) == Type::s32 ? 2 : 0) | (half ? 4 : 0));
      in.fn = h;
      decode_dst_srcs(c, in, Type::u32, 3);
    };
  };
  table["dp4a"] = dot(dp4a_op, false);
  table["dp2a"] = dot(dp2a_op, true);
  table["fns"] = [](DecodeCtx& c, OpcodeParts&, Instr& in) {
    in.fn = fns_op;
    decode_dst_srcs(c, in, Type::u32, 3);
  };
  table["shf"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    int dir = info.take_one({"l", "r"});
    int mode = info.take_one({"wrap", "clamp"});
    if (dir < 0 || mode < 0) c.fail("shf needs .l/.r and .wrap/.clamp");
    in.mod = static_cast<std::uint8_t>(dir | (mode << 1));
    in.fn = shf_op;
    decode_dst_srcs(c, in, Type::u32, 3);
  };
  table["lop3"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    in.type = info.type();
    in.fn = bits_handler(c, in.type, lop3_op<std::uint32_t>, lop3_op<std::uint64_t>);
    decode_dst_srcs(c, in, in.type, 3);
    in.s[3] = c.src(c.op(4), Type::u32);
  };
  table["prmt"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    int mode = info.take_one({"f4e", "b4e", "rc8", "ecl", "ecr", "rc16"});
    in.mod = static_cast<std::uint8_t>(mode + 1);
    in.fn = prmt_op;
    decode_dst_srcs(c, in, Type::u32, 3);
  };
  table["bfe"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    in.type = info.type();
    in.fn = int_handler<Bfe>(c, in.type, false);
    in.d[0] = c.dst(c.op(0));
    in.s[0] = c.src(c.op(1), in.type);
    in.s[1] = c.src(c.op(2), Type::u32);
    in.s[2] = c.src(c.op(3), Type::u32);
  };
  table["bfi"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    in.type = info.type();
    in.fn = bits_handler(c, in.type, bfi_op<std::uint32_t>, bfi_op<std::uint64_t>);
    decode_dst_srcs(c, in, in.type, 2);
    in.s[2] = c.src(c.op(3), Type::u32);
    in.s[3] = c.src(c.op(4), Type::u32);
  };
  auto count = [](Handler h32, Handler h64) {
    return [h32, h64](DecodeCtx& c, OpcodeParts& info, Instr& in) {
      in.type = info.type();
      in.fn = bits_handler(c, in.type, h32, h64);
      decode_dst_srcs(c, in, in.type, 1);
    };
  };
  table["popc"] = count(popc_op<std::uint32_t>, popc_op<std::uint64_t>);
  table["clz"] = count(clz_op<std::uint32_t>, clz_op<std::uint64_t>);
  table["brev"] = count(brev_op<std::uint32_t>, brev_op<std::uint64_t>);
  table["bfind"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    in.type = info.type();
    in.mod = info.take("shiftamt") ? 1 : 0;
    in.fn = int_handler<Bfind>(c, in.type, false);
    decode_dst_srcs(c, in, in.type, 1);
  };
}

}  // namespace kiln::cuda::vgpu
