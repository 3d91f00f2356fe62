// The issue cost of PTX instructions (see issue_cost.h).
//
// Sources, per row of the table below:
//  [T] CUDA C++ Programming Guide, "Arithmetic Instructions", table "Throughput of Native
//      Arithmetic Instructions (Number of Results per Clock Cycle per Multiprocessor)", columns
//      8.0 and 9.0: FP32 add/mul/fma 64 / 128; FP16 and BF16 add/mul/fma 256 results (128
//      f16x2 instructions) / 256; FP64 32 / 64; rcp, rsqrt, sqrt, ex2, lg2, sin, cos (MUFU) 16;
//      32-bit integer add, multiply, compare, min, max, shift and bitwise ops 64; bit reverse,
//      bit-field extract/insert, population count, leading zeros 16; warp shuffle 32; type
//      conversions 16.
//  [L] Load/store units: 32 per SM on the A100 and the H100 (NVIDIA A100 and H100 Tensor Core
//      GPU architecture whitepapers, SM diagrams: 4 partitions x 8 LD/ST): one thread-
//      instruction of any width up to 128 bits per unit per clock. A 128-bit load moves 16 bytes
//      for the cost a 32-bit one pays for 4.
//  [S] Sequences: what ptxas (CUDA 13.0, -arch=sm_90 -O3) emits for one PTX instruction,
//      counted as the SASS instructions a one-instruction kernel has beyond an empty one (the
//      cubin's .text section, 16 bytes an instruction, trailing NOPs dropped): rem/div.u32 18,
//      rem/div.s32 22-24, rem.u64 71, rem/div.s64 84-90, mul.lo.u64 and mul.hi.u64 ~4 and ~8 after
//      the operand moves; div.rn.f32, rcp.rn.f32 and sqrt.rn.f32 have a fast path of one MUFU op
//      and 6-9 FP32 instructions (their static counts, 113, 64 and 37, are mostly the slow path
//      a rare operand takes). Each sequence is weighted by its instructions' rows: an integer
//      division is I2F + MUFU.RCP + F2I (3 at the conversion/MUFU rate) + the rest at the
//      integer rate.
//  [P] ptxas folds some PTX away: ld.param of a kernel parameter becomes a constant-bank
//      operand, cvta.to.global is the identity, most register movs are renamed, narrowing
//      integer cvts read a register half. They are charged half a slot or nothing.
#include "runtime/cuda/virtual/issue_cost.h"

#include <algorithm>
#include <string_view>

#include "runtime/cuda/virtual/decoder.h"

namespace kiln::cuda::vgpu {
namespace {

// Per SM per clock, [T] and [L].
struct Rates {
  unsigned fp32, fp16x2, fp64, mufu, int32, bits, shuffle, convert, lsu;
};
constexpr Rates kSm90{128, 128, 64, 16, 64, 16, 32, 16, 32};
constexpr Rates kSm80{64, 128, 32, 16, 64, 16, 32, 16, 32};

// Quarter slots of one thread-instruction at `per_clock` per SM (128 issue slots per clock).
constexpr unsigned q(unsigned per_clock) {
  return 128 * kCostQuarters / per_clock;
}

bool is_half(Type t) {
  return t == Type::f16 || t == Type::f16x2 || t == Type::bf16 || t == Type::bf16x2;
}
bool is_wide(Type t) {
  return t == Type::b64 || t == Type::u64 || t == Type::s64;
}
bool is_int(Type t) {
  return !is_float(t) && t != Type::pred && t != Type::none && t != Type::tf32;
}

// A float arithmetic op at its type's rate.
unsigned float_op(const Rates& r, Type t) {
  if (t == Type::f64) return q(r.fp64);
  if (is_half(t)) return q(r.fp16x2);
  return q(r.fp32);
}

// An integer op: 64-bit ones are two 32-bit ones (IADD3 + IADD3.X, SHF pairs, ISETP + .EX).
unsigned int_op(const Rates& r, Type t, unsigned wide_ops = 2) {
  return q(r.int32) * (is_wide(t) ? wide_ops : 1);
}

// [S]: I2F + MUFU.RCP + F2I, then `rest` integer instructions.
unsigned int_division(const Rates& r, unsigned rest) {
  return 2 * q(r.convert) + q(r.mufu) + rest * q(r.int32);
}

unsigned cvt_cost(const Rates& r, Type to, Type from) {
  if (is_int(to) && is_int(from)) {
    // Narrowing reads a register half [P]; widening is a sign or zero extension (one ALU op).
    return type_bytes(to) <= type_bytes(from) ? 0 : q(r.int32);
  }
  if (to == Type::f32 && from == Type::bf16) return q(r.int32);  // a shift into the high half
  if (to == Type::f32 && from == Type::f16) return q(r.fp16x2);  // HADD2.F32
  if (to == from) return q(r.fp32);  // cvt.rni / .sat on the same type: FRND or an FP32 op
  return q(r.convert);               // F2FP (one for a bf16x2 / f16x2 pair), I2F, F2I, F2F
}

unsigned cost(const OpcodeParts& info, const Instr& in, const Rates& r) {
  std::string_view op = info.base;
  Type t = info.type();
  auto has = [&](std::string_view m) {
    return std::find(info.mods.begin(), info.mods.end(), m) != info.mods.end();
  };
  if (op == "ld" || op == "ldu" || op == "st") {
    if (in.space == Space::param) return 0;  // [P]
    if (in.space == Space::const_) return q(r.lsu) / 2;
    return q(r.lsu);  // [L]
  }
  if (op == "atom" || op == "red") return 2 * q(r.lsu);
  if (op == "ldmatrix" || op == "cp" || op == "prefetch" || op == "prefetchu") return q(r.lsu);
  if (op == "mov") {
    // A special register is an S2R; the rest are renamed or folded [P].
    bool special = in.s[0] > kSlotZero && in.s[0] < kNumFixedSlots;
    return special ? q(r.int32) : kCostQuarters / 2;
  }
  if (op == "cvta") return 0;  // [P]
  if (op == "cvt") return cvt_cost(r, info.type(0), info.type(1));
  if (op == "shfl") return q(r.shuffle);
  if (op == "redux") return q(r.bits);
  if (op == "vote" || op == "activemask" || op == "elect" || op == "isspacep") return q(r.int32);
  if (op == "match") return 2 * q(r.shuffle);
  if (op == "bar" || op == "barrier" || op == "membar" || op == "fence") return q(r.lsu);
  if (op == "bra") return q(r.int32);
  if (op == "call" || op == "ret") return 2 * q(r.int32);
  if (op == "exit") return kCostQuarters;
  if (op == "setp" || op == "set") {
    Type c = info.types.empty() ? t : info.types.back();
    if (c == Type::f64) return q(r.fp64);
    if (is_half(c)) return q(r.fp16x2);
    return int_op(r, c);  // FSETP and ISETP issue at the compare rate [T]
  }
  if (op == "selp" || op == "slct") return int_op(r, t);
  if (op == "rcp" || op == "sqrt" || op == "rsqrt" || op == "ex2" || op == "lg2" || op == "sin" ||
      op == "cos" || op == "tanh") {
    if (has("approx")) return q(r.mufu) * (t == Type::f64 ? 2 : 1);
    // [S]: the fast path, MUFU plus ~7 FMAs at the type's rate.
    return q(r.mufu) + 7 * float_op(r, t);
  }
  if (op == "div" || op == "rem") {
    if (is_float(t)) {
      if (has("approx")) return q(r.mufu) + float_op(r, t);
      if (has("full")) return q(r.mufu) + 3 * float_op(r, t);
      return q(r.mufu) + 9 * float_op(r, t);  // [S] div.rn's fast path
    }
    if (is_wide(t)) return int_division(r, is_signed(t) ? 87 : 68);  // [S]
    return int_division(r, is_signed(t) ? 19 : 15);                  // [S]
  }
  if (op == "add" || op == "sub" || op == "mul" || op == "mad" || op == "fma" || op == "neg" ||
      op == "abs" || op == "min" || op == "max" || op == "addc" || op == "subc" || op == "madc" ||
      op == "copysign" || op == "testp" || op == "mul24" || op == "mad24" || op == "sad") {
    if (is_float(t)) return float_op(r, t);
    if (t == Type::pred) return q(r.int32);
    if ((op == "mul" || op == "mad") && has("wide")) return 2 * q(r.int32);  // IMAD.WIDE
    if ((op == "mul" || op == "mad") && is_wide(t)) return int_op(r, t, has("hi") ? 8 : 4);
    if ((op == "min" || op == "max" || op == "abs") && is_wide(t)) return int_op(r, t, 4);
    return int_op(r, t);
  }
  if (op == "and" || op == "or" || op == "xor" || op == "not" || op == "cnot" || op == "shl" ||
      op == "shr" || op == "lop3" || op == "shf" || op == "prmt" || op == "dp4a" || op == "dp2a")
    return int_op(r, t);
  if (op == "bfe" || op == "bfi" || op == "brev" || op == "popc" || op == "clz" || op == "bfind")
    return q(r.bits) * (is_wide(t) ? 2 : 1);
  if (op == "fns") return 4 * q(r.bits);
  // mma's tensor-core time is modeled from its flops (profiler.h): its issue is one slot, as
  // for the rest (nanosleep, trap, griddepcontrol, ...).
  return kCostQuarters;
}

}  // namespace

std::uint16_t issue_cost(const OpcodeParts& info, const Instr& in, CostArch arch) {
  return static_cast<std::uint16_t>(cost(info, in, arch == CostArch::sm90 ? kSm90 : kSm80));
}

}  // namespace kiln::cuda::vgpu
