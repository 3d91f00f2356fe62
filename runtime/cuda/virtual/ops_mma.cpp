// Tensor-core instructions, as warp collectives over the whole converged warp:
//   mma.sync.aligned.{m16n8k16,m16n8k8}.row.col.f32.{f16,bf16}.{f16,bf16}.f32
//   mma.sync.aligned.{m16n8k16,m16n8k8}.row.col.{f16,f32}.f16.f16.{f16,f32}
//   mma.sync.aligned.{m16n8k8,m16n8k4}.row.col.f32.tf32.tf32.f32
//   ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}{.shared{::cta}}.b16
// Which lane holds which element is the PTX ISA's (9.7.14.5, "Matrix Fragments for mma.m16n8k16
// with floating point type", "... for mma.m16n8k8", "... for mma.m16n8k4"; 9.7.14.5.15
// "ldmatrix"), written out below as functions of groupID = lane >> 2, threadID_in_group =
// lane % 4 and the element index i, exactly as the ISA states them.
//
// Arithmetic: D = A * B + C, each D element computed on its own. The products of f16, bf16 and
// tf32 elements are exact in f64 (at most 11 x 11 significand bits); they are added in order of
// k to C's element in f64 and the sum is rounded once to the D type (round to nearest even).
// Hardware does not round IEEE-sequentially either: it adds the products in a wide fixed-point
// sum, truncating the bits it shifts out (Fasi et al., "Numerical behavior of NVIDIA tensor
// cores", PeerJ Comput. Sci. 2021), so its results can differ from these in the last bits; a
// test of a tensor-core kernel compares with a tolerance, or uses values whose sums are exact.
// A .tf32 operand is a .b32 register whose low 13 significand bits are ignored (truncated), as
// the hardware does with f32 data that cvt.rna.tf32.f32 did not round first.
#include <fmt/format.h>

#include <bit>
#include <cmath>

#include "runtime/cuda/virtual/collective.h"
#include "runtime/cuda/virtual/float_format.h"
#include "runtime/cuda/virtual/ops_util.h"
#include "runtime/cuda/virtual/profiler.h"

namespace kiln::cuda::vgpu {
namespace {

enum MmaShape : std::uint8_t { kM16N8K16, kM16N8K8, kM16N8K4 };

int shape_k(std::uint8_t shape) {
  return shape == kM16N8K16 ? 16 : shape == kM16N8K8 ? 8 : 4;
}

// Registers of each fragment for a shape and input type (A, B; C and D by their own type).
int a_regs(std::uint8_t shape, Type t) {
  if (t == Type::tf32) return shape == kM16N8K8 ? 4 : 2;  // one element per register
  return shape == kM16N8K16 ? 4 : 2;                      // two 16-bit elements per register
}
int b_regs(std::uint8_t shape, Type t) {
  if (t == Type::tf32) return shape == kM16N8K8 ? 2 : 1;
  return shape == kM16N8K16 ? 2 : 1;
}
int acc_regs(Type t) {
  return t == Type::f32 ? 4 : 2;  // 4 f32 elements, or 4 f16 packed in two .f16x2
}

struct RowCol {
  int row, col;
};

// Element i of lane's A fragment (16 x K, row-major).
RowCol a_element(std::uint8_t shape, Type t, int lane, int i) {
  int g = lane >> 2, tg = lane % 4;
  if (t == Type::tf32) {
    if (shape == kM16N8K4) return {g + 8 * i, tg};  // a0: groupID, a1: groupID + 8
    // m16n8k8: row groupID for a0, a2 (+8 for a1, a3); col threadID_in_group (+4 for a2, a3).
    return {g + 8 * (i & 1), tg + 4 * (i >> 1)};
  }
  if (shape == kM16N8K8)  // row groupID for a0, a1 (+8 for a2, a3); col 2 * tig + (i & 1)
    return {g + 8 * (i >> 1), tg * 2 + (i & 1)};
  // m16n8k16: row groupID for 0 <= i < 2 || 4 <= i < 6, else +8; col 2 * tig + (i & 1), +8 for
  // i >= 4.
  return {g + 8 * ((i >> 1) & 1), tg * 2 + (i & 1) + 8 * (i >> 2)};
}

// Element i of lane's B fragment (K x 8, "col": column-major); row is the k index.
RowCol b_element(std::uint8_t shape, Type t, int lane, int i) {
  int g = lane >> 2, tg = lane % 4;
  if (t == Type::tf32) {
    if (shape == kM16N8K4) return {tg, g};
    return {tg + 4 * i, g};  // m16n8k8: b0 row threadID_in_group, b1 row threadID_in_group + 4
  }
  if (shape == kM16N8K8) return {tg * 2 + i, g};
  return {tg * 2 + (i & 1) + 8 * (i >> 1), g};  // m16n8k16: +8 for b2, b3
}

// Element i of lane's C / D fragment (16 x 8), the same for every shape and accumulator type.
RowCol acc_element(int lane, int i) {
  int g = lane >> 2, tg = lane % 4;
  return {g + 8 * (i >> 1), tg * 2 + (i & 1)};
}

// Element `i` of a fragment held in `regs` of type `t` (two 16-bit elements per register, low
// half first, or one 32-bit element), as an exact double.
double fragment_value(const ThreadState& t, const std::uint32_t* regs, Type type, int i) {
  switch (type) {
    case Type::f16:
      return half_to_float(static_cast<std::uint16_t>(t.r[regs[i / 2]] >> (16 * (i % 2))));
    case Type::bf16:
      return bf16_to_float(static_cast<std::uint16_t>(t.r[regs[i / 2]] >> (16 * (i % 2))));
    case Type::tf32:
      return std::bit_cast<float>(static_cast<std::uint32_t>(t.r[regs[i]]) & 0xffffe000u);
    default:
      return std::bit_cast<float>(static_cast<std::uint32_t>(t.r[regs[i]]));
  }
}

int elements(Type type, int regs) {
  return type == Type::f16 || type == Type::bf16 ? 2 * regs : regs;
}

}  // namespace

void execute_mma(ThreadState* const* lanes) {
  const Instr& in = *lanes[0]->wait;
  std::uint8_t shape = in.mod;
  Type ab = in.type, ctype = in.type2, dtype = in.mod2 ? Type::f16 : Type::f32;
  int k_dim = shape_k(shape);
  int na = a_regs(shape, ab), nb = b_regs(shape, ab);
  double a[16][16], b[16][8], c[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const ThreadState& t = *lanes[lane];
    const std::uint32_t* ops = t.frames.back().fn->operand_slots.data() + t.wait->imm;
    for (int i = 0; i < elements(ab, na); ++i) {
      RowCol e = a_element(shape, ab, lane, i);
      a[e.row][e.col] = fragment_value(t, ops, ab, i);
    }
    for (int i = 0; i < elements(ab, nb); ++i) {
      RowCol e = b_element(shape, ab, lane, i);
      b[e.row][e.col] = fragment_value(t, ops + na, ab, i);
    }
    for (int i = 0; i < 4; ++i) {
      RowCol e = acc_element(lane, i);
      c[e.row][e.col] = fragment_value(t, ops + na + nb, ctype, i);
    }
  }
  // Every lane's registers are read before any is written: D may name C's (or A's) registers.
  std::uint32_t d_bits[32][4] = {};
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i) {
      RowCol e = acc_element(lane, i);
      double sum = c[e.row][e.col];
      for (int k = 0; k < k_dim; ++k) sum += a[e.row][k] * b[k][e.col];
      if (dtype == Type::f32) {
        d_bits[lane][i] = std::bit_cast<std::uint32_t>(static_cast<float>(sum));
      } else {
        auto h = static_cast<std::uint32_t>(encode_float(FloatFormat::f16, sum, Round::rn));
        d_bits[lane][i / 2] |= h << (16 * (i % 2));
      }
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    ThreadState& t = *lanes[lane];
    for (int i = 0; i < acc_regs(dtype); ++i) t.r[t.wait->d[i]] = d_bits[lane][i];
  }
  if (LaunchProfiler* p = lanes[0]->launch->profiler)
    p->count_mma(2ull * 16 * 8 * static_cast<std::uint64_t>(k_dim), ab == Type::tf32);
}

// ldmatrix: lanes 8j..8j+7 give the addresses of the 8 rows (16 bytes each) of matrix j. Without
// .trans lane L receives row L / 4, columns 2 (L % 4) and 2 (L % 4) + 1 of each matrix; .trans
// loads the matrix column-major, so lane L receives column L / 4, rows 2 (L % 4) and +1.
void execute_ldmatrix(ThreadState* const* lanes) {
  const Instr& in0 = *lanes[0]->wait;
  int num = in0.vec;
  bool trans = in0.mod != 0;
  std::uint16_t m[4][8][8];
  for (int lane = 0; lane < 32; ++lane) {
    ThreadState& t = *lanes[lane];
    const Instr& in = *t.wait;
    int j = lane / 8;
    if (j >= num) {
      // No address from this lane: keep its shared-memory request count in step with the others.
      if (t.launch->profiler) profile_shared_skip(t);
      continue;
    }
    std::uint64_t addr = t.r[in.addr] + static_cast<std::uint64_t>(in.imm);
    Space space = in.space;
    if (space == Space::generic) {
      if (addr - kSharedWindow >= kWindowSize)
        fault(t, in,
              fmt::format("ldmatrix: generic address {:#x} of row {} is not in shared memory", addr,
                          lane % 8));
      space = Space::shared;
      addr -= kSharedWindow;
    }
    const std::uint8_t* row = resolve(t, in, space, addr, 16, Access::load);
    for (int col = 0; col < 8; ++col) m[j][lane % 8][col] = load_as<std::uint16_t>(row + 2 * col);
  }
  for (int lane = 0; lane < 32; ++lane) {
    ThreadState& t = *lanes[lane];
    int r = lane / 4, c = 2 * (lane % 4);
    for (int j = 0; j < num; ++j) {
      std::uint32_t lo = trans ? m[j][c][r] : m[j][r][c];
      std::uint32_t hi = trans ? m[j][c + 1][r] : m[j][r][c + 1];
      t.r[t.wait->d[j]] = lo | hi << 16;
    }
  }
}

namespace {

// "{r0, r1, ...}" with exactly `n` registers into `out`.
void decode_vector(DecodeCtx& c, const ast::Operand& o, int n, const char* what,
                   std::vector<std::uint32_t>& out, bool dst, Type type = Type::b32) {
  if (o.kind != ast::Operand::kVec || static_cast<int>(o.elems.size()) != n)
    c.fail(fmt::format("operand {} must be a vector of {} registers", what, n));
  for (const auto& e : o.elems) out.push_back(dst ? c.dst(e) : c.src(e, type));
}

void decode_mma(DecodeCtx& c, OpcodeParts& info, Instr& in) {
  if (!info.take("sync") || !info.take("aligned")) c.fail("expected mma.sync.aligned");
  int shape = info.take_one({"m16n8k16", "m16n8k8", "m16n8k4"});
  if (shape < 0) c.fail("only the shapes m16n8k16, m16n8k8 and m16n8k4 are implemented");
  if (!info.take("row") || !info.take("col")) c.fail("only .row.col layouts are implemented");
  if (info.types.size() != 4) c.fail("expected .dtype.atype.btype.ctype");
  Type dtype = info.type(0), atype = info.type(1), btype = info.type(2), ctype = info.type(3);
  if (atype != btype) c.fail("A and B of different types are not implemented");
  bool ok = false;
  switch (atype) {
    case Type::f16:
      ok = shape != kM16N8K4 && (dtype == Type::f16 || dtype == Type::f32) &&
           (ctype == Type::f16 || ctype == Type::f32);
      break;
    case Type::bf16:
      ok = shape != kM16N8K4 && dtype == Type::f32 && ctype == Type::f32;
      break;
    case Type::tf32:
      ok = shape != kM16N8K16 && dtype == Type::f32 && ctype == Type::f32;
      break;
    default:
      break;
  }
  if (!ok)
    c.fail(fmt::format("type combination .{}.{}.{}.{} is not implemented for this shape",
                       type_name(dtype), type_name(atype), type_name(btype), type_name(ctype)));
  in.mod = static_cast<std::uint8_t>(shape);
  in.type = atype;
  in.type2 = ctype;
  in.mod2 = dtype == Type::f16 ? 1 : 0;
  park_as(in, WarpKind::mma);
  if (c.nops() != 4) c.fail("expected d, a, b, c");
  std::vector<std::uint32_t> dst;
  decode_vector(c, c.op(0), acc_regs(dtype), "d", dst, true);
  for (std::size_t i = 0; i < dst.size(); ++i) in.d[i] = dst[i];
  std::vector<std::uint32_t> srcs;
  decode_vector(c, c.op(1), a_regs(in.mod, atype), "a", srcs, false);
  decode_vector(c, c.op(2), b_regs(in.mod, atype), "b", srcs, false);
  decode_vector(c, c.op(3), acc_regs(ctype), "c", srcs, false,
                ctype == Type::f32 ? Type::f32 : Type::b32);
  in.imm = c.add_operand_slots(srcs);
}

Space take_shared_space(DecodeCtx& c, OpcodeParts& info) {
  if (info.take("shared") || info.take("shared::cta")) return Space::shared;
  for (const char* other : {"global", "local", "param", "const", "shared::cluster"})
    if (info.has(other)) c.fail("ldmatrix reads shared memory only");
  return Space::generic;
}

void decode_ldmatrix(DecodeCtx& c, OpcodeParts& info, Instr& in) {
  if (!info.take("sync") || !info.take("aligned")) c.fail("expected ldmatrix.sync.aligned");
  if (!info.take("m8n8")) c.fail("only the .m8n8 shape is implemented");
  int num = info.take_one({"x1", "x2", "x4"});
  if (num < 0) c.fail("missing .x1, .x2 or .x4");
  if (info.type() != Type::b16 || info.types.size() != 1) c.fail("only .b16 is implemented");
  in.vec = static_cast<std::uint8_t>(1 << num);
  in.mod = info.take("trans") ? 1 : 0;
  Space declared = take_shared_space(c, info);
  park_as(in, WarpKind::ldmatrix);
  if (c.nops() != 2) c.fail("expected {d...}, [address]");
  std::vector<std::uint32_t> dst;
  decode_vector(c, c.op(0), in.vec, "d", dst, true);
  for (std::size_t i = 0; i < dst.size(); ++i) in.d[i] = dst[i];
  Space sym = c.mem(c.op(1), in);
  in.space = declared != Space::generic ? declared : sym;
  if (in.space != Space::generic && in.space != Space::shared)
    c.fail("ldmatrix reads shared memory only");
}

}  // namespace

void add_mma_decoders(DecoderTable& table) {
  table["mma"] = decode_mma;
  table["ldmatrix"] = decode_ldmatrix;
}

}  // namespace kiln::cuda::vgpu
