// Memory instructions: ld / ldu / st (every state space, generic addresses, .v2/.v4), atom and
// red (add min max inc dec exch cas and or xor on 32/64-bit ints, f32, f64, f16/bf16 and x2),
// and the cache hints that need no work (prefetch, discard, applypriority).
#include <cmath>

#include "runtime/cuda/virtual/float_format.h"
#include "runtime/cuda/virtual/ops_util.h"

namespace kiln::cuda::vgpu {
namespace {

template <class T, bool Signed>
void ld_op(ThreadState& t, const Instr& in) {
  std::uint64_t a = t.r[in.addr] + static_cast<std::uint64_t>(in.imm);
  unsigned n = in.vec;
  const std::uint8_t* p = resolve(t, in, in.space, a, sizeof(T) * n, Access::load);
  for (unsigned i = 0; i < n; ++i) {
    T v = load_as<T>(p + i * sizeof(T));
    if constexpr (Signed) {
      t.r[in.d[i]] = static_cast<std::uint64_t>(
          static_cast<std::int64_t>(static_cast<std::make_signed_t<T>>(v)));
    } else {
      t.r[in.d[i]] = v;
    }
  }
}

template <class T>
void st_op(ThreadState& t, const Instr& in) {
  std::uint64_t a = t.r[in.addr] + static_cast<std::uint64_t>(in.imm);
  unsigned n = in.vec;
  std::uint8_t* p = resolve(t, in, in.space, a, sizeof(T) * n, Access::store);
  for (unsigned i = 0; i < n; ++i) store_as<T>(p + i * sizeof(T), static_cast<T>(t.r[in.s[i]]));
}

void nop(ThreadState&, const Instr&) {}

enum AtomOp : std::uint8_t { kAdd, kMin, kMax, kInc, kDec, kExch, kCas, kAnd, kOr, kXor };

template <class T>
T atom_apply(std::uint8_t op, T old, T b, T c) {
  switch (op) {
    case kAdd:
      if constexpr (std::is_integral_v<T>)
        return static_cast<T>(Unsigned<T>(old) + Unsigned<T>(b));
      else
        return old + b;
    case kMin:
      if constexpr (std::is_floating_point_v<T>)
        return std::isnan(old) ? b : std::fmin(old, b);
      else
        return old < b ? old : b;
    case kMax:
      if constexpr (std::is_floating_point_v<T>)
        return std::isnan(old) ? b : std::fmax(old, b);
      else
        return old > b ? old : b;
    case kExch:
      return b;
    case kCas:
      return old == b ? c : old;
    default:
      break;
  }
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
      case kInc:
        return old >= b ? T(0) : T(old + 1);
      case kDec:
        return (old == 0 || old > b) ? b : T(old - 1);
      case kAnd:
        return old & b;
      case kOr:
        return old | b;
      case kXor:
        return old ^ b;
    }
  }
  return old;
}

template <class T>
void atom_op(ThreadState& t, const Instr& in) {
  std::uint64_t a = t.r[in.addr] + static_cast<std::uint64_t>(in.imm);
  std::uint8_t* p = resolve(t, in, in.space, a, sizeof(T), Access::atomic);
  T old = load_as<T>(p);
  T nv = atom_apply<T>(in.mod, old, get<T>(t, in.s[0]), get<T>(t, in.s[1]));
  store_as<T>(p, nv);
  put<T>(t, in.d[0], old);
}

// f16 / bf16 (scalar or x2) atomic add: type2 = lanes, mod2 = 1 for bf16.
void atom_add_half(ThreadState& t, const Instr& in) {
  std::uint64_t a = t.r[in.addr] + static_cast<std::uint64_t>(in.imm);
  unsigned bytes = in.type2 == Type::f16x2 || in.type2 == Type::bf16x2 ? 4 : 2;
  std::uint8_t* p = resolve(t, in, in.space, a, bytes, Access::atomic);
  bool bf = in.mod2 == 1;
  FloatFormat f = bf ? FloatFormat::bf16 : FloatFormat::f16;
  std::uint32_t old = bytes == 4 ? load_as<std::uint32_t>(p) : load_as<std::uint16_t>(p);
  std::uint32_t b = get<std::uint32_t>(t, in.s[0]), r = 0;
  for (unsigned lane = 0; lane < bytes / 2; ++lane) {
    auto x = std::uint16_t(old >> (16 * lane)), y = std::uint16_t(b >> (16 * lane));
    double s = double(bf ? bf16_to_float(x) : half_to_float(x)) +
               double(bf ? bf16_to_float(y) : half_to_float(y));
    r |= std::uint32_t(encode_float(f, s, Round::rn)) << (16 * lane);
  }
  if (bytes == 4)
    store_as<std::uint32_t>(p, r);
  else
    store_as<std::uint16_t>(p, std::uint16_t(r));
  put<std::uint32_t>(t, in.d[0], old);
}

// cp.async{.ca,.cg}.shared.global [dst], [src], cp-size{, src-size}: done at once (the copy is
// complete before any wait_group could observe it); bytes past src-size are zero-filled.
void cp_async_op(ThreadState& t, const Instr& in) {
  auto size = static_cast<unsigned>(t.r[in.s[1]]);
  auto src_size = static_cast<unsigned>(t.r[in.s[2]]);
  if (src_size > size)
    fault(t, in, fmt::format("cp.async src-size {} > cp-size {}", src_size, size));
  std::uint64_t dst_addr = t.r[in.addr] + static_cast<std::uint64_t>(in.imm);
  std::uint64_t src_addr =
      t.r[in.s[0]] + static_cast<std::uint64_t>(static_cast<std::int32_t>(in.aux));
  std::uint8_t* dst = resolve(t, in, Space::shared, dst_addr, size, Access::store);
  if (src_size) {
    const std::uint8_t* src = resolve(t, in, in.space, src_addr, size, Access::load);
    std::memcpy(dst, src, src_size);
  }
  std::memset(dst + src_size, 0, size - src_size);
}

Space take_space(OpcodeParts& info) {
  int sp = info.take_one({"global", "shared", "local", "param", "const"});
  if (sp < 0 && info.take("shared::cta")) sp = 1;
  return sp < 0 ? Space::generic : static_cast<Space>(sp + 1);
}

int take_vec(OpcodeParts& info) {
  int v = info.take_one({"v2", "v4"});
  return v < 0 ? 1 : (v == 0 ? 2 : 4);
}

Handler ld_handler(DecodeCtx& c, Type t) {
  switch (type_bytes(t)) {
    case 1:
      return is_signed(t) ? ld_op<std::uint8_t, true> : ld_op<std::uint8_t, false>;
    case 2:
      return is_signed(t) ? ld_op<std::uint16_t, true> : ld_op<std::uint16_t, false>;
    case 4:
      return is_signed(t) ? ld_op<std::uint32_t, true> : ld_op<std::uint32_t, false>;
    case 8:
      return ld_op<std::uint64_t, false>;
  }
  c.fail(fmt::format("type .{} not supported", type_name(t)));
}

Handler st_handler(DecodeCtx& c, Type t) {
  switch (type_bytes(t)) {
    case 1:
      return st_op<std::uint8_t>;
    case 2:
      return st_op<std::uint16_t>;
    case 4:
      return st_op<std::uint32_t>;
    case 8:
      return st_op<std::uint64_t>;
  }
  c.fail(fmt::format("type .{} not supported", type_name(t)));
}

// ld/st that communicate between threads by design (global racecheck treats them as atomics).
bool is_flag_access(const OpcodeParts& info) {
  return info.has("volatile") || info.has("relaxed") || info.has("acquire") ||
         info.has("release") || info.has("mmio");
}

// The symbol's space wins over a missing qualifier; a qualifier on a generic register keeps it.
void decode_address(DecodeCtx& c, const ast::Operand& o, Instr& in, Space declared) {
  Space sym = c.mem(o, in);
  in.space = declared != Space::generic ? declared : sym;
}

}  // namespace

void add_memory_decoders(DecoderTable& table) {
  auto ld = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    if (is_flag_access(info)) in.flags |= kFlagSyncAccess;
    info.take("nc");
    info.take("unified");
    in.type = info.type();
    in.vec = static_cast<std::uint8_t>(take_vec(info));
    in.fn = ld_handler(c, in.type);
    Space sp = take_space(info);
    const ast::Operand& d = c.op(0);
    if (d.kind == ast::Operand::kVec) {
      if (d.elems.size() != in.vec) c.fail("vector size does not match");
      for (std::size_t i = 0; i < d.elems.size(); ++i) in.d[i] = c.dst(d.elems[i]);
    } else {
      if (in.vec != 1) c.fail("vector load needs {...}");
      in.d[0] = c.dst(d);
    }
    decode_address(c, c.op(1), in, sp);
  };
  table["ld"] = ld;
  table["ldu"] = ld;
  table["st"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    if (is_flag_access(info)) in.flags |= kFlagSyncAccess;
    in.type = info.type();
    in.vec = static_cast<std::uint8_t>(take_vec(info));
    in.fn = st_handler(c, in.type);
    Space sp = take_space(info);
    decode_address(c, c.op(0), in, sp);
    const ast::Operand& v = c.op(1);
    Type et = type_bytes(in.type) == 1 ? Type::b8 : in.type;
    if (v.kind == ast::Operand::kVec) {
      if (v.elems.size() != in.vec) c.fail("vector size does not match");
      for (std::size_t i = 0; i < v.elems.size(); ++i) in.s[i] = c.src(v.elems[i], et);
    } else {
      if (in.vec != 1) c.fail("vector store needs {...}");
      in.s[0] = c.src(v, et);
    }
  };
  auto atom = [](bool has_dst) {
    return [has_dst](DecodeCtx& c, OpcodeParts& info, Instr& in) {
      in.type = info.type();
      Space sp = take_space(info);
      int op =
          info.take_one({"add", "min", "max", "inc", "dec", "exch", "cas", "and", "or", "xor"});
      if (op < 0) c.fail("missing atomic operation");
      info.take("noftz");
      in.mod = static_cast<std::uint8_t>(op);
      std::size_t i = 0;
      if (has_dst) in.d[0] = c.dst(c.op(i++));
      decode_address(c, c.op(i++), in, sp);
      if (in.space == Space::local || in.space == Space::param || in.space == Space::const_)
        c.fail("atomics need global, shared or generic addresses");
      Type t = in.type;
      if (t == Type::f16 || t == Type::f16x2 || t == Type::bf16 || t == Type::bf16x2) {
        if (op != kAdd) c.fail("only add on 16-bit floats");
        in.type2 = t;
        in.mod2 = (t == Type::bf16 || t == Type::bf16x2) ? 1 : 0;
        in.fn = atom_add_half;
        in.s[0] = c.src(c.op(i), Type::b32);
        return;
      }
      switch (t) {
        case Type::b32:
        case Type::u32:
          in.fn = atom_op<std::uint32_t>;
          break;
        case Type::s32:
          in.fn = atom_op<std::int32_t>;
          break;
        case Type::b64:
        case Type::u64:
          in.fn = atom_op<std::uint64_t>;
          break;
        case Type::s64:
          in.fn = atom_op<std::int64_t>;
          break;
        case Type::f32:
          in.fn = atom_op<float>;
          break;
        case Type::f64:
          in.fn = atom_op<double>;
          break;
        default:
          c.fail(fmt::format("type .{} not supported", type_name(t)));
      }
      if (is_float(t) && op != kAdd && op != kMin && op != kMax && op != kExch && op != kCas)
        c.fail("operation not defined on floats");
      in.s[0] = c.src(c.op(i++), t);
      if (op == kCas) in.s[1] = c.src(c.op(i), t);
    };
  };
  table["atom"] = atom(true);
  table["red"] = atom(false);
  auto hint = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    (void)c;
    for (std::size_t i = 0; i < info.mods.size(); ++i) info.used[i] = true;
    in.fn = nop;
  };
  table["prefetch"] = hint;
  table["prefetchu"] = hint;
  table["discard"] = hint;
  table["applypriority"] = hint;
  table["cp"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    if (!info.take("async")) c.fail("only cp.async is implemented");
    if (info.take("commit_group") || info.take("wait_group") || info.take("wait_all")) {
      in.fn = nop;  // every copy completed when it was issued
      return;
    }
    if (info.has("bulk") || info.has("mbarrier")) c.fail("bulk / mbarrier cp.async");
    info.take_one({"ca", "cg"});
    if (!info.take("shared") && !info.take("shared::cta")) c.fail("destination must be .shared");
    if (!info.take("global")) c.fail("source must be .global");
    if (c.mem(c.op(0), in) == Space::generic) in.space = Space::shared;
    Instr src;
    Space src_space = c.mem(c.op(1), src);
    in.space = src_space == Space::generic ? Space::global : src_space;
    in.s[0] = src.addr;
    in.aux = static_cast<std::uint32_t>(static_cast<std::int32_t>(src.imm));
    in.s[1] = c.src(c.op(2), Type::u32);
    in.s[2] =
        c.nops() > 3 && c.op(3).kind == ast::Operand::kImm ? c.src(c.op(3), Type::u32) : in.s[1];
    in.fn = cp_async_op;
  };
  table["createpolicy"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    for (std::size_t i = 0; i < info.mods.size(); ++i) info.used[i] = true;
    in.fn = nop;
    in.d[0] = c.dst(c.op(0));
  };
}

}  // namespace kiln::cuda::vgpu
