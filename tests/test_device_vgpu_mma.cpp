// Tensor-core instructions on the virtual GPU: mma.sync (m16n8k16 / m16n8k8 / m16n8k4 with f16,
// bf16 and tf32 inputs, f32 and f16 accumulators) and ldmatrix (.x1 .x2 .x4, with and without
// .trans), against a scalar matmul written here and the fragment layouts of the PTX ISA
// (9.7.14.5 "Matrix Fragments for mma.m16n8k16 / m16n8k8 / m16n8k4", 9.7.14.5.15 "ldmatrix"),
// transcribed below as the ISA states them. The profiler's tensor-core counts and modeled time
// are checked against hand-computed figures.
//
// What a layout decides, and so what these checks see, is which element each register holds:
// the rows of A, C and D, the columns of B, C and D, and which A register pairs with which B
// register in the k-sum. (Renaming k in A and B alike pairs the same registers: nothing could
// observe it, on hardware either.)

#include <algorithm>
#include <bit>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "runtime/cuda/virtual/profiler.h"
#include "support/float_bits.h"
#include "support/vgpu_harness.h"

using namespace kiln;
using namespace kiln::test;
namespace vgpu = kiln::cuda::vgpu;

namespace {

// ---- encoders, written apart from the interpreter's ---------------------------------------

// f16 / bf16 bits of `v`, which must be exactly representable (tests/support/float_bits.h
// encodes them from the IEEE layouts, apart from the interpreter's conversions).
std::uint16_t f16_exact(double v) {
  std::uint16_t bits = kiln::test::f16_bits(v);
  BOOST_REQUIRE(kiln::test::f16_value(bits) == v);
  return bits;
}
std::uint16_t bf16_exact(double v) {
  std::uint16_t bits = kiln::test::bf16_bits(v);
  BOOST_REQUIRE(kiln::test::bf16_value(bits) == v);
  return bits;
}
using kiln::test::f16_value;

// tf32 by cvt.rna: nearest of the f32's values with 10 significand bits, ties away from zero.
float tf32_rna(float f) {
  double x = f;
  int e;
  std::frexp(x, &e);
  double ulp = std::ldexp(1.0, e - 11);  // 11 significant bits
  double r = std::copysign(std::floor(std::fabs(x) / ulp + 0.5) * ulp, x);
  return static_cast<float>(r);
}

// ---- the PTX ISA's fragment layouts, as it writes them ------------------------------------

struct Rc {
  int row, col;
};
int group_id(int lane) {
  return lane >> 2;
}
int tig(int lane) {  // threadID_in_group
  return lane % 4;
}

// m16n8k16, .f16 / .bf16 A: "row = groupID for ai where 0 <= i < 2 || 4 <= i < 6, groupID + 8
// otherwise; col = (threadID_in_group * 2) + (i & 0x1) for ai where i < 4, ... + 8 for i >= 4".
Rc a_k16(int lane, int i) {
  int row = (i < 2 || (4 <= i && i < 6)) ? group_id(lane) : group_id(lane) + 8;
  int col = i < 4 ? tig(lane) * 2 + (i & 1) : tig(lane) * 2 + (i & 1) + 8;
  return {row, col};
}
// m16n8k16 B: "row = (threadID_in_group * 2) + (i & 0x1) for bi where i < 2, ... + 8 for i >= 2;
// col = groupID".
Rc b_k16(int lane, int i) {
  return {i < 2 ? tig(lane) * 2 + (i & 1) : tig(lane) * 2 + (i & 1) + 8, group_id(lane)};
}
// m16n8k8, .f16 / .bf16 A: "row = groupID for a0 and a1, groupID + 8 for a2 and a3;
// col = threadID_in_group * 2 + (i & 0x1)".
Rc a_k8(int lane, int i) {
  return {i < 2 ? group_id(lane) : group_id(lane) + 8, tig(lane) * 2 + (i & 1)};
}
// m16n8k8 B: "row = (threadID_in_group * 2) + i for bi where i = {0, 1}; col = groupID".
Rc b_k8(int lane, int i) {
  return {tig(lane) * 2 + i, group_id(lane)};
}
// m16n8k8 .tf32 A: "row = groupID for a0 and a2, groupID + 8 for a1 and a3;
// col = threadID_in_group for a0 and a1, threadID_in_group + 4 for a2 and a3".
Rc a_k8_tf32(int lane, int i) {
  return {(i == 0 || i == 2) ? group_id(lane) : group_id(lane) + 8,
          (i == 0 || i == 1) ? tig(lane) : tig(lane) + 4};
}
// m16n8k8 .tf32 B: "row = threadID_in_group for b0, threadID_in_group + 4 for b1; col = groupID".
Rc b_k8_tf32(int lane, int i) {
  return {i == 0 ? tig(lane) : tig(lane) + 4, group_id(lane)};
}
// m16n8k4 .tf32 A: "row = groupID for a0, groupID + 8 for a1; col = threadID_in_group".
Rc a_k4_tf32(int lane, int i) {
  return {i == 0 ? group_id(lane) : group_id(lane) + 8, tig(lane)};
}
// m16n8k4 .tf32 B: "row = threadID_in_group; col = groupID".
Rc b_k4_tf32(int lane, int) {
  return {tig(lane), group_id(lane)};
}
// C / D of every shape: "row = groupID for ci where i < 2, groupID + 8 for i >= 2;
// col = (threadID_in_group * 2) + (i & 0x1)".
Rc acc(int lane, int i) {
  return {i < 2 ? group_id(lane) : group_id(lane) + 8, tig(lane) * 2 + (i & 1)};
}

// One mma problem per warp: A (16 x K), B (K x 8), C (16 x 8) as exact doubles.
struct Problem {
  int k;
  std::vector<double> a, b, c;
  double at(const std::vector<double>& m, int cols, Rc e) const {
    return m[static_cast<std::size_t>(e.row * cols + e.col)];
  }
};

// D = A B + C in f64, k in order.
std::vector<double> reference(const Problem& p) {
  std::vector<double> d(128);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      double s = p.c[static_cast<std::size_t>(m * 8 + n)];
      for (int k = 0; k < p.k; ++k)
        s += p.a[static_cast<std::size_t>(m * p.k + k)] * p.b[static_cast<std::size_t>(k * 8 + n)];
      d[static_cast<std::size_t>(m * 8 + n)] = s;
    }
  return d;
}

// Values n / 16 with |n| <= 32: exact in f16 and bf16, and every sum of their products exact in
// f32.
std::vector<double> dyadic(std::size_t count, std::uint32_t& seed) {
  std::vector<double> v(count);
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = static_cast<double>(static_cast<int>(seed >> 26) - 32) / 16.0;
  }
  return v;
}

// Half an ulp of f32 at `v`'s magnitude (normal range).
double half_ulp(double v) {
  int e = v == 0 ? -126 : std::max(std::ilogb(static_cast<float>(v)), -126);
  return std::ldexp(1.0, e - 24);
}

enum class In { f16, bf16, tf32 };

std::uint32_t element_bits(In in, double v) {
  switch (in) {
    case In::f16:
      return f16_exact(v);
    case In::bf16:
      return bf16_exact(v);
    case In::tf32:
      return std::bit_cast<std::uint32_t>(static_cast<float>(v));
  }
  return 0;
}

// A fragment's registers for one lane: `count` elements from `m` (cols wide) at `layout`, two
// 16-bit elements per register (low half first) or one 32-bit element per register.
std::vector<std::uint32_t> pack(In in, const std::vector<double>& m, int cols, int count,
                                Rc (*layout)(int, int), int lane) {
  std::vector<std::uint32_t> regs;
  for (int i = 0; i < count; ++i) {
    Rc e = layout(lane, i);
    std::uint32_t bits = element_bits(in, m[static_cast<std::size_t>(e.row * cols + e.col)]);
    if (in == In::tf32)
      regs.push_back(bits);
    else if (i % 2 == 0)
      regs.push_back(bits);
    else
      regs.back() |= bits << 16;
  }
  return regs;
}

const char* kMmaKernels = R"(
#define LANE_REGS(p, n) (p + (blockIdx.x * blockDim.x + threadIdx.x) * n)
extern "C" __global__ void k16_f32(const unsigned* a, const unsigned* b, const float* c, float* d,
                                   int bf) {
  const unsigned* A = LANE_REGS(a, 4); const unsigned* B = LANE_REGS(b, 2);
  const float* C = LANE_REGS(c, 4); float* D = LANE_REGS(d, 4);
  float d0, d1, d2, d3;
  if (bf)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
                 : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
                 : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B[0]), "r"(B[1]),
                   "f"(C[0]), "f"(C[1]), "f"(C[2]), "f"(C[3]));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
                 : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
                 : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B[0]), "r"(B[1]),
                   "f"(C[0]), "f"(C[1]), "f"(C[2]), "f"(C[3]));
  D[0] = d0; D[1] = d1; D[2] = d2; D[3] = d3;
}
extern "C" __global__ void k16_f16acc(const unsigned* a, const unsigned* b, const unsigned* c,
                                      unsigned* d) {
  const unsigned* A = LANE_REGS(a, 4); const unsigned* B = LANE_REGS(b, 2);
  const unsigned* C = LANE_REGS(c, 2); unsigned* D = LANE_REGS(d, 2);
  unsigned d0, d1;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, "
               "{%6,%7}, {%8,%9};"
               : "=r"(d0), "=r"(d1)
               : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B[0]), "r"(B[1]), "r"(C[0]),
                 "r"(C[1]));
  D[0] = d0; D[1] = d1;
}
extern "C" __global__ void k8_f32(const unsigned* a, const unsigned* b, const float* c, float* d,
                                  int bf) {
  const unsigned* A = LANE_REGS(a, 2); const unsigned* B = LANE_REGS(b, 1);
  const float* C = LANE_REGS(c, 4); float* D = LANE_REGS(d, 4);
  float d0, d1, d2, d3;
  if (bf)
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, "
                 "{%6}, {%7,%8,%9,%10};"
                 : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
                 : "r"(A[0]), "r"(A[1]), "r"(B[0]), "f"(C[0]), "f"(C[1]), "f"(C[2]), "f"(C[3]));
  else
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, "
                 "{%6}, {%7,%8,%9,%10};"
                 : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
                 : "r"(A[0]), "r"(A[1]), "r"(B[0]), "f"(C[0]), "f"(C[1]), "f"(C[2]), "f"(C[3]));
  D[0] = d0; D[1] = d1; D[2] = d2; D[3] = d3;
}
// tf32: the f32 inputs are rounded with cvt.rna.tf32.f32 first, as __float_to_tf32 does.
extern "C" __global__ void k8_tf32(const float* a, const float* b, const float* c, float* d) {
  const float* A = LANE_REGS(a, 4); const float* B = LANE_REGS(b, 2);
  const float* C = LANE_REGS(c, 4); float* D = LANE_REGS(d, 4);
  unsigned ra[4], rb[2];
  for (int i = 0; i < 4; ++i) asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(ra[i]) : "f"(A[i]));
  for (int i = 0; i < 2; ++i) asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(rb[i]) : "f"(B[i]));
  float d0, d1, d2, d3;
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
               : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
               : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]),
                 "f"(C[0]), "f"(C[1]), "f"(C[2]), "f"(C[3]));
  D[0] = d0; D[1] = d1; D[2] = d2; D[3] = d3;
}
extern "C" __global__ void k4_tf32(const unsigned* a, const unsigned* b, const float* c,
                                   float* d) {
  const unsigned* A = LANE_REGS(a, 2); const unsigned* B = LANE_REGS(b, 1);
  const float* C = LANE_REGS(c, 4); float* D = LANE_REGS(d, 4);
  float d0, d1, d2, d3;
  asm volatile("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5}, "
               "{%6}, {%7,%8,%9,%10};"
               : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
               : "r"(A[0]), "r"(A[1]), "r"(B[0]), "f"(C[0]), "f"(C[1]), "f"(C[2]), "f"(C[3]));
  D[0] = d0; D[1] = d1; D[2] = d2; D[3] = d3;
}
)";

// Runs `warps` independent problems through `kernel` (registers packed here by the ISA's
// layouts) and returns each warp's D as 16 x 8 doubles (read back through the C/D layout).
struct MmaCase {
  const char* kernel;
  In in;
  int k;
  int a_count, b_count;  // elements per lane
  Rc (*a_layout)(int, int);
  Rc (*b_layout)(int, int);
  bool f16_acc = false;
  int bf_flag = -1;  // the kernel's last argument, when it takes one
};

std::vector<std::vector<double>> run_mma(Gpu& gpu, const std::string& ptx, const MmaCase& mc,
                                         const std::vector<Problem>& problems) {
  int warps = static_cast<int>(problems.size());
  std::vector<std::uint32_t> a, b, c;
  std::vector<float> cf;
  int a_regs = mc.in == In::tf32 ? mc.a_count : mc.a_count / 2;
  int b_regs = mc.in == In::tf32 ? mc.b_count : mc.b_count / 2;
  for (const Problem& p : problems)
    for (int lane = 0; lane < 32; ++lane) {
      for (auto r : pack(mc.in, p.a, p.k, mc.a_count, mc.a_layout, lane)) a.push_back(r);
      for (auto r : pack(mc.in, p.b, 8, mc.b_count, mc.b_layout, lane)) b.push_back(r);
      if (mc.f16_acc) {
        for (auto r : pack(In::f16, p.c, 8, 4, acc, lane)) c.push_back(r);
      } else {
        for (int i = 0; i < 4; ++i) cf.push_back(static_cast<float>(p.at(p.c, 8, acc(lane, i))));
      }
    }
  BOOST_REQUIRE(a.size() == static_cast<std::size_t>(warps * 32 * a_regs));
  BOOST_REQUIRE(b.size() == static_cast<std::size_t>(warps * 32 * b_regs));
  DevicePtr da = gpu.upload(a), db = gpu.upload(b);
  std::size_t nd = static_cast<std::size_t>(warps) * 32 * (mc.f16_acc ? 2 : 4);
  DevicePtr dc = mc.f16_acc ? gpu.upload(c) : gpu.upload(cf);
  DevicePtr dd = gpu.zeros<std::uint32_t>(nd);
  Dim3 grid{static_cast<unsigned>(warps)}, block{32};
  if (mc.bf_flag >= 0)
    gpu.run(ptx, mc.kernel, grid, block, 0, da, db, dc, dd, mc.bf_flag);
  else
    gpu.run(ptx, mc.kernel, grid, block, 0, da, db, dc, dd);
  std::vector<std::uint32_t> out = gpu.download<std::uint32_t>(dd, nd);
  std::vector<std::vector<double>> result;
  for (int w = 0; w < warps; ++w) {
    std::vector<double> d(128);
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) {
        Rc e = acc(lane, i);
        std::size_t base = static_cast<std::size_t>(w * 32 + lane);
        double v =
            mc.f16_acc
                ? f16_value(static_cast<std::uint16_t>(out[base * 2 + i / 2] >> (16 * (i % 2))))
                : static_cast<double>(std::bit_cast<float>(out[base * 4 + i]));
        d[static_cast<std::size_t>(e.row * 8 + e.col)] = v;
      }
    result.push_back(d);
  }
  return result;
}

std::vector<Problem> dyadic_problems(int warps, int k, std::uint32_t seed) {
  std::vector<Problem> ps;
  for (int w = 0; w < warps; ++w)
    ps.push_back(Problem{k, dyadic(static_cast<std::size_t>(16 * k), seed),
                         dyadic(static_cast<std::size_t>(k * 8), seed), dyadic(128, seed)});
  return ps;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(vgpu_mma)

BOOST_AUTO_TEST_CASE(the_ptx_isa_fragment_figures_agree_with_the_layouts_used_here) {
  // Entries read off the ISA's figures (Figure 79-81: m16n8k16; 71-72: m16n8k8), so that the
  // formulas above, shared by every check in this file, are themselves checked.
  auto same = [](Rc a, int row, int col) { return a.row == row && a.col == col; };
  BOOST_TEST(same(a_k16(0, 0), 0, 0));     // T0 a0 at the top left
  BOOST_TEST(same(a_k16(0, 1), 0, 1));     // T0 a1 beside it
  BOOST_TEST(same(a_k16(0, 2), 8, 0));     // T0 a2, a3 in row 8
  BOOST_TEST(same(a_k16(0, 4), 0, 8));     // T0 a4, a5 in the right half
  BOOST_TEST(same(a_k16(3, 1), 0, 7));     // T3 ends row 0's left half
  BOOST_TEST(same(a_k16(4, 0), 1, 0));     // T4 starts row 1
  BOOST_TEST(same(a_k16(31, 7), 15, 15));  // T31 a7 at the bottom right
  BOOST_TEST(same(b_k16(0, 0), 0, 0));     // T0 b0, b1: rows 0-1 of column 0
  BOOST_TEST(same(b_k16(1, 1), 3, 0));     // T1 b1: row 3, column 0
  BOOST_TEST(same(b_k16(4, 0), 0, 1));     // T4 starts column 1
  BOOST_TEST(same(b_k16(31, 3), 15, 7));   // T31 b3 at the bottom right
  BOOST_TEST(same(acc(0, 0), 0, 0));
  BOOST_TEST(same(acc(0, 3), 8, 1));
  BOOST_TEST(same(acc(5, 0), 1, 2));
  BOOST_TEST(same(acc(31, 3), 15, 7));
  BOOST_TEST(same(a_k8(31, 3), 15, 7));
  BOOST_TEST(same(b_k8(2, 1), 5, 0));
  BOOST_TEST(same(a_k8_tf32(0, 1), 8, 0));  // tf32 A: a1 is row 8, a2 column 4
  BOOST_TEST(same(a_k8_tf32(0, 2), 0, 4));
  BOOST_TEST(same(b_k8_tf32(3, 1), 7, 0));
  // Each layout covers its matrix exactly once over the warp.
  auto covers = [](Rc (*layout)(int, int), int count, int rows, int cols) {
    std::vector<int> hits(static_cast<std::size_t>(rows * cols), 0);
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < count; ++i) {
        Rc e = layout(lane, i);
        if (e.row < 0 || e.row >= rows || e.col < 0 || e.col >= cols) return false;
        ++hits[static_cast<std::size_t>(e.row * cols + e.col)];
      }
    for (int h : hits)
      if (h != 1) return false;
    return true;
  };
  BOOST_TEST(covers(a_k16, 8, 16, 16));
  BOOST_TEST(covers(b_k16, 4, 16, 8));
  BOOST_TEST(covers(a_k8, 4, 16, 8));
  BOOST_TEST(covers(b_k8, 2, 8, 8));
  BOOST_TEST(covers(a_k8_tf32, 4, 16, 8));
  BOOST_TEST(covers(b_k8_tf32, 2, 8, 8));
  BOOST_TEST(covers(a_k4_tf32, 2, 16, 4));
  BOOST_TEST(covers(b_k4_tf32, 1, 4, 8));
  BOOST_TEST(covers(acc, 4, 16, 8));
}

BOOST_AUTO_TEST_CASE(mma_of_every_shape_and_type_matches_a_scalar_matmul) {
  Gpu gpu;
  std::string ptx = compile(kMmaKernels);
  // Dyadic inputs: every product and sum is exact, so D must equal the reference exactly
  // whatever order the k-sum takes. Three warps, each its own problem.
  const MmaCase cases[] = {
      {"k16_f32", In::f16, 16, 8, 4, a_k16, b_k16, false, 0},
      {"k16_f32", In::bf16, 16, 8, 4, a_k16, b_k16, false, 1},
      {"k16_f16acc", In::f16, 16, 8, 4, a_k16, b_k16, true, -1},
      {"k8_f32", In::f16, 8, 4, 2, a_k8, b_k8, false, 0},
      {"k8_f32", In::bf16, 8, 4, 2, a_k8, b_k8, false, 1},
      {"k4_tf32", In::tf32, 4, 2, 1, a_k4_tf32, b_k4_tf32, false, -1},
  };
  std::uint32_t seed = 7;
  for (const MmaCase& mc : cases) {
    BOOST_TEST_CONTEXT(mc.kernel << (mc.in == In::bf16 ? " bf16" : "")) {
      auto problems = dyadic_problems(3, mc.k, seed++);
      if (mc.f16_acc)  // f16 accumulators: keep D within f16's exact integers / 16
        for (auto& p : problems)
          for (auto* m : {&p.a, &p.b})
            for (auto& x : *m) x = std::round(x * 4) / 8;
      auto got = run_mma(gpu, ptx, mc, problems);
      for (std::size_t w = 0; w < problems.size(); ++w) {
        auto want = reference(problems[w]);
        for (std::size_t i = 0; i < 128; ++i) BOOST_TEST(got[w][i] == want[i], "element " << i);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(mma_rounds_a_full_precision_sum_once) {
  Gpu gpu;
  std::string ptx = compile(kMmaKernels);
  // Full-precision f16 values (random significands, exponent fields 9 to 15: magnitudes in
  // [2^-6, 2)) and f32 accumulators: D is the sum rounded once to f32, within half an ulp.
  std::uint32_t seed = 99;
  std::vector<Problem> problems;
  for (int w = 0; w < 2; ++w) {
    Problem p{16, std::vector<double>(256), std::vector<double>(128), std::vector<double>(128)};
    for (auto* m : {&p.a, &p.b})
      for (auto& x : *m) {
        seed = seed * 1664525u + 1013904223u;
        auto bits = static_cast<std::uint16_t>((seed >> 16) & 0x8fff);  // exponent 9..24
        x = f16_value(static_cast<std::uint16_t>(bits | 0x2400));
      }
    for (auto& x : p.c) x = static_cast<float>(lcg_float(seed) * 10);
    problems.push_back(p);
  }
  auto got = run_mma(gpu, ptx, {"k16_f32", In::f16, 16, 8, 4, a_k16, b_k16, false, 0}, problems);
  for (std::size_t w = 0; w < problems.size(); ++w) {
    auto want = reference(problems[w]);
    for (std::size_t i = 0; i < 128; ++i) {
      BOOST_TEST(std::fabs(got[w][i] - want[i]) <= half_ulp(want[i]), "element " << i);
    }
  }
}

BOOST_AUTO_TEST_CASE(tf32_mma_after_cvt_rna_matches_a_scalar_matmul_of_the_rounded_inputs) {
  Gpu gpu;
  std::string ptx = compile(kMmaKernels);
  std::uint32_t seed = 5;
  std::vector<float> a(32 * 4), b(32 * 2), c(32 * 4);
  for (auto& x : a) x = lcg_float(seed);
  for (auto& x : b) x = lcg_float(seed);
  for (auto& x : c) x = lcg_float(seed);
  DevicePtr da = gpu.upload(a), db = gpu.upload(b), dc = gpu.upload(c), dd = gpu.zeros<float>(128);
  gpu.run(ptx, "k8_tf32", Dim3{1}, Dim3{32}, 0, da, db, dc, dd);
  auto out = gpu.download<float>(dd, 128);
  // The matrices each lane's registers hold, placed by the ISA's tf32 layouts.
  Problem p{8, std::vector<double>(128), std::vector<double>(64), std::vector<double>(128)};
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i) {
      Rc e = a_k8_tf32(lane, i);
      p.a[static_cast<std::size_t>(e.row * 8 + e.col)] = tf32_rna(a[lane * 4 + i]);
      Rc f = acc(lane, i);
      p.c[static_cast<std::size_t>(f.row * 8 + f.col)] = c[lane * 4 + i];
    }
    for (int i = 0; i < 2; ++i) {
      Rc e = b_k8_tf32(lane, i);
      p.b[static_cast<std::size_t>(e.row * 8 + e.col)] = tf32_rna(b[lane * 2 + i]);
    }
  }
  auto want = reference(p);
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      Rc e = acc(lane, i);
      double w = want[static_cast<std::size_t>(e.row * 8 + e.col)];
      BOOST_TEST(std::fabs(out[lane * 4 + i] - w) <= half_ulp(w), "lane " << lane << " d" << i);
    }
  // The inputs were not already tf32: without the rounding the result would differ.
  bool rounded = false;
  for (float x : a) rounded = rounded || tf32_rna(x) != x;
  BOOST_TEST(rounded);
}

BOOST_AUTO_TEST_CASE(cvt_to_tf32_rounds_as_each_mode_says) {
  Gpu gpu;
  std::string ptx = compile(R"(
extern "C" __global__ void to_tf32(const float* x, unsigned* out) {
  float v = x[threadIdx.x];
  unsigned a, n, z;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(a) : "f"(v));
  asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(n) : "f"(v));
  asm("cvt.rz.tf32.f32 %0, %1;" : "=r"(z) : "f"(v));
  out[3 * threadIdx.x] = a; out[3 * threadIdx.x + 1] = n; out[3 * threadIdx.x + 2] = z;
})");
  // tf32 keeps 10 significand bits: at 1.0 its ulp is 2^-10.
  const double u = std::ldexp(1.0, -10);
  struct Case {
    double x, rna, rn, rz;
  };
  const Case cases[] = {
      {1 + u / 2, 1 + u, 1, 1},                      // a tie, below an even neighbour
      {1 + 3 * u / 2, 1 + 2 * u, 1 + 2 * u, 1 + u},  // a tie, above an odd one
      {1 + u / 4, 1, 1, 1},
      {-(1 + 3 * u / 4), -(1 + u), -(1 + u), -1},
      {3.0, 3.0, 3.0, 3.0},
      {0.0, 0.0, 0.0, 0.0},
  };
  std::vector<float> x;
  for (const Case& c : cases) x.push_back(static_cast<float>(c.x));
  x.push_back(std::numeric_limits<float>::max());  // rounds up past the largest tf32
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  DevicePtr dx = gpu.upload(x), out = gpu.zeros<std::uint32_t>(3 * x.size());
  gpu.run(ptx, "to_tf32", Dim3{1}, Dim3{static_cast<unsigned>(x.size())}, 0, dx, out);
  auto o = gpu.download<std::uint32_t>(out, 3 * x.size());
  auto as_float = [](std::uint32_t b) { return static_cast<double>(std::bit_cast<float>(b)); };
  for (std::size_t i = 0; i < std::size(cases); ++i) {
    BOOST_TEST(as_float(o[3 * i]) == cases[i].rna, "rna of " << cases[i].x);
    BOOST_TEST(as_float(o[3 * i + 1]) == cases[i].rn, "rn of " << cases[i].x);
    BOOST_TEST(as_float(o[3 * i + 2]) == cases[i].rz, "rz of " << cases[i].x);
    BOOST_TEST(static_cast<float>(as_float(o[3 * i])) == tf32_rna(x[i]));
  }
  for (std::size_t i = 0; i < 3 * x.size(); ++i) BOOST_TEST((o[i] & 0x1fffu) == 0u);
  std::size_t m = std::size(cases);
  BOOST_TEST(std::isinf(as_float(o[3 * m])));                    // max float, rna: up to infinity
  BOOST_TEST(as_float(o[3 * m + 2]) == std::ldexp(2 - u, 127));  // rz: the largest tf32
  BOOST_TEST(std::isinf(as_float(o[3 * (m + 1)])));              // infinity stays
  for (int k = 0; k < 3; ++k) BOOST_TEST(std::isnan(as_float(o[3 * (m + 2) + k])));
}

// ---- ldmatrix -------------------------------------------------------------------------------

namespace {

// Four 8 x 8 matrices of 16-bit codes in shared memory, each row 48 bytes after the one stored
// before it and matrix rows stored in the order 0, 3, 6, 1, 4, 7, 2, 5: lane L gives the address
// of row L % 8 of matrix L / 8, so a lane whose address were ignored or misread shows.
const char* kLdmatrixKernels = R"(
#define SLOT(j, r) (((j) * 8 + ((r) * 3) % 8) * 24)
__device__ unsigned row_address(const unsigned short* s, int lane, int providers) {
  if (lane >= providers) return 0xfffffff0u;  // never read: past any shared memory
  return (unsigned)__cvta_generic_to_shared(s + SLOT(lane / 8, lane % 8));
}
extern "C" __global__ void ldm(unsigned* out) {
  __shared__ __align__(16) unsigned short s[4 * 8 * 24];
  for (int i = threadIdx.x; i < 4 * 8 * 24; i += 32) s[i] = (unsigned short)i;
  __syncwarp();
  int l = threadIdx.x;
  unsigned* o = out + l * 16;
  unsigned r0, r1, r2, r3;
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];"
               : "=r"(r0) : "r"(row_address(s, l, 8)));
  o[0] = r0;
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
               : "=r"(r0), "=r"(r1) : "r"(row_address(s, l, 16)));
  o[1] = r0; o[2] = r1;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(row_address(s, l, 32)));
  o[3] = r0; o[4] = r1; o[5] = r2; o[6] = r3;
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];"
               : "=r"(r0) : "r"(row_address(s, l, 8)));
  o[7] = r0;
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
               : "=r"(r0), "=r"(r1) : "r"(row_address(s, l, 16)));
  o[8] = r0; o[9] = r1;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(row_address(s, l, 32)));
  o[10] = r0; o[11] = r1; o[12] = r2; o[13] = r3;
  // A generic address (no state space), as the ISA allows when it points into shared memory.
  const unsigned short* p = s + SLOT(l / 8, l % 8);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "l"(p));
  o[14] = r0 ^ r1 ^ r2 ^ r3;
  o[15] = r3;
}
)";

// Code of element (row, col) of matrix j in the kernel's shared array.
std::uint32_t code(int j, int row, int col) {
  return static_cast<std::uint32_t>((j * 8 + (row * 3) % 8) * 24 + col);
}

}  // namespace

BOOST_AUTO_TEST_CASE(ldmatrix_gives_each_lane_the_fragments_the_ptx_isa_shows) {
  Gpu gpu;
  std::string ptx = compile(kLdmatrixKernels);
  DevicePtr out = gpu.zeros<std::uint32_t>(32 * 16);
  gpu.run(ptx, "ldm", Dim3{1}, Dim3{32}, 0, out);
  auto o = gpu.download<std::uint32_t>(out, 32 * 16);
  for (int lane = 0; lane < 32; ++lane) {
    const std::uint32_t* r = o.data() + lane * 16;
    // ISA Figure 104: a group of four threads holds a row; thread L holds row L / 4, columns
    // 2 (L % 4) and 2 (L % 4) + 1, the lower column in the lower half.
    auto plain = [&](int j) {
      return code(j, lane / 4, 2 * (lane % 4)) | code(j, lane / 4, 2 * (lane % 4) + 1) << 16;
    };
    // .trans: the matrix read column-major, so thread L holds column L / 4 of the stored rows.
    auto trans = [&](int j) {
      return code(j, 2 * (lane % 4), lane / 4) | code(j, 2 * (lane % 4) + 1, lane / 4) << 16;
    };
    BOOST_TEST_CONTEXT("lane " << lane) {
      BOOST_TEST(r[0] == plain(0));
      BOOST_TEST(r[1] == plain(0));
      BOOST_TEST(r[2] == plain(1));
      for (int j = 0; j < 4; ++j) BOOST_TEST(r[3 + j] == plain(j));
      BOOST_TEST(r[7] == trans(0));
      BOOST_TEST(r[8] == trans(0));
      BOOST_TEST(r[9] == trans(1));
      for (int j = 0; j < 4; ++j) BOOST_TEST(r[10 + j] == trans(j));
      BOOST_TEST(r[14] == (plain(0) ^ plain(1) ^ plain(2) ^ plain(3)));
      BOOST_TEST(r[15] == plain(3));
    }
  }
  // One documented entry spelled out: thread 0 of .x1 holds row 0, columns 0 and 1.
  BOOST_TEST(o[0] == (code(0, 0, 0) | code(0, 0, 1) << 16));
}

BOOST_AUTO_TEST_CASE(ldmatrix_fed_mma_computes_a_tile_product_as_flash_attention_kernels_do) {
  // A (16 x 16) and B (16 x 8, k x n) row-major in shared memory; ldmatrix.x4 with lane L at
  // A[L % 16][8 (L / 16)] gives the A fragment, ldmatrix.x2.trans with lane L at B[L % 16][0]
  // the B fragment; D goes to memory through the C/D layout. f16 and bf16.
  Gpu gpu;
  std::string ptx = compile(R"(
extern "C" __global__ void tile(const unsigned short* a, const unsigned short* b, float* d, int bf) {
  __shared__ __align__(16) unsigned short sa[16 * 16];
  __shared__ __align__(16) unsigned short sb[16 * 8];
  int l = threadIdx.x;
  for (int i = l; i < 256; i += 32) sa[i] = a[i];
  for (int i = l; i < 128; i += 32) sb[i] = b[i];
  __syncwarp();
  unsigned a0, a1, a2, a3, b0, b1;
  unsigned pa = (unsigned)__cvta_generic_to_shared(&sa[(l % 16) * 16 + (l / 16) * 8]);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3) : "r"(pa));
  unsigned pb = (unsigned)__cvta_generic_to_shared(&sb[(l % 16) * 8]);
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
               : "=r"(b0), "=r"(b1) : "r"(pb));
  float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  if (bf)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  int g = l / 4, t = l % 4;
  d[g * 8 + 2 * t] = d0; d[g * 8 + 2 * t + 1] = d1;
  d[(g + 8) * 8 + 2 * t] = d2; d[(g + 8) * 8 + 2 * t + 1] = d3;
})");
  for (int bf = 0; bf < 2; ++bf) {
    std::uint32_t seed = 31 + static_cast<std::uint32_t>(bf);
    Problem p{16, dyadic(256, seed), dyadic(128, seed), std::vector<double>(128, 0.0)};
    std::vector<std::uint16_t> a, b;
    for (double x : p.a) a.push_back(static_cast<std::uint16_t>(bf ? bf16_exact(x) : f16_exact(x)));
    for (double x : p.b) b.push_back(static_cast<std::uint16_t>(bf ? bf16_exact(x) : f16_exact(x)));
    DevicePtr da = gpu.upload(a), db = gpu.upload(b), dd = gpu.zeros<float>(128);
    gpu.run(ptx, "tile", Dim3{1}, Dim3{32}, 0, da, db, dd, bf);
    auto got = gpu.download<float>(dd, 128);
    auto want = reference(p);
    for (std::size_t i = 0; i < 128; ++i)
      BOOST_TEST(static_cast<double>(got[i]) == want[i], (bf ? "bf16" : "f16") << " element " << i);
  }
}

// ---- faults and compilers -------------------------------------------------------------------

namespace {

const char* kDivergent = R"(
extern "C" __global__ void half_warp(float* d) {
  unsigned one = 0x3c003c00u;  // two f16 1.0
  float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  if (threadIdx.x < 16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%4,%4,%4}, {%4,%4}, {%0,%1,%2,%3};"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(one));
  d[threadIdx.x] = d0 + d1 + d2 + d3;
}
extern "C" __global__ void whole_warp(float* d) {
  unsigned one = 0x3c003c00u;
  float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
               "{%4,%4,%4,%4}, {%4,%4}, {%0,%1,%2,%3};"
               : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(one));
  d[threadIdx.x] = d0 + d1 + d2 + d3;
}
)";

}  // namespace

BOOST_AUTO_TEST_CASE(mma_in_a_divergent_or_partial_warp_is_a_fault) {
  Gpu gpu;
  std::string ptx = compile(kDivergent);
  DevicePtr d = gpu.zeros<float>(64);
  std::string diverged = error_text([&] { gpu.run(ptx, "half_warp", Dim3{1}, Dim3{32}, 0, d); });
  BOOST_TEST(mentions(diverged, "mma.sync.aligned"), diverged);
  BOOST_TEST(mentions(diverged, "all 32 lanes"), diverged);
  BOOST_TEST(mentions(diverged, "lane 16"), diverged);
  BOOST_TEST(mentions(diverged, "half_warp"), diverged);
  std::string partial = error_text([&] { gpu.run(ptx, "whole_warp", Dim3{1}, Dim3{48}, 0, d); });
  BOOST_TEST(mentions(partial, "all 32 lanes"), partial);
  BOOST_TEST(mentions(partial, "does not exist"), partial);
  // The same kernel on whole warps runs: every D element is 16 (sixteen products 1 x 1).
  BOOST_TEST(error_text([&] { gpu.run(ptx, "whole_warp", Dim3{1}, Dim3{64}, 0, d); }).empty());
  auto out = gpu.download<float>(d, 64);
  for (float x : out) BOOST_TEST(x == 64.0f);
}

BOOST_AUTO_TEST_CASE(hand_written_ptx_two_mma_sites_immediates_and_unsupported_forms) {
  Gpu gpu;
  auto module = [](const std::string& body) {
    return ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n"
           "  .reg .pred %p<2>;\n  .reg .b32 %r<4>;\n  .reg .f32 %f<4>;\n  .reg .b64 %rd<4>;\n"
           "  ld.param.u64 %rd1, [p];\n  mov.u32 %r2, %tid.x;\n  mul.wide.u32 %rd2, %r2, 4;\n"
           "  add.s64 %rd3, %rd1, %rd2;\n  mov.b32 %r1, 1006648320;\n" +  // two f16 1.0
           body +
           "\n  st.global.f32 [%rd3], %f0;\n  ret;\n}\n";
  };
  const std::string mma =
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f0,%f1,%f2,%f3}, {%r1,%r1,%r1,%r1}, "
      "{%r1,%r1}, ";
  DevicePtr d = gpu.zeros<float>(32);
  // C given as immediates: D = 16 + 2.5 everywhere.
  BOOST_TEST(error_text([&] {
               gpu.run(module(mma + "{0f40200000,0f40200000,0f40200000,0f40200000};"), "k", Dim3{1},
                       Dim3{32}, 0, d);
             }).empty());
  for (float x : gpu.download<float>(d, 32)) BOOST_TEST(x == 18.5f);
  // Half the warp at one mma, half at another: .aligned is broken, which the report says.
  std::string split = error_text([&] {
    gpu.run(module("  setp.lt.u32 %p1, %r2, 16;\n  @%p1 bra A;\n  " + mma +
                   "{%f0,%f0,%f0,%f0};\n  bra.uni E;\nA:\n  " + mma + "{%f1,%f1,%f1,%f1};\nE:"),
            "k", Dim3{1}, Dim3{32}, 0, d);
  });
  BOOST_TEST(mentions(split, "another mma.sync.aligned instruction"), split);
  // Forms not implemented are refused when the module loads, naming the instruction.
  std::string shape = error_text([&] {
    gpu.run(module("  mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 {%f0,%f1,%f2,%f3,%f0,%f1,"
                   "%f2,%f3}, {%r1,%r1}, {%r1,%r1}, {%f0,%f1,%f2,%f3,%f0,%f1,%f2,%f3};"),
            "k", Dim3{1}, Dim3{32}, 0, d);
  });
  BOOST_TEST(mentions(shape, "mma.sync.aligned.m8n8k4"), shape);
  BOOST_TEST(mentions(shape, "m16n8k16"), shape);
  std::string types = error_text([&] {
    gpu.run(module("  mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f16 {%f0,%f1,%f2,%f3}, "
                   "{%r1,%r1,%r1,%r1}, {%r1,%r1}, {%r1,%r1};"),
            "k", Dim3{1}, Dim3{32}, 0, d);
  });
  BOOST_TEST(mentions(types, ".f32.bf16.bf16.f16"), types);
}

BOOST_AUTO_TEST_CASE(nvrtc_builds_the_tensor_core_kernels_for_sm_80_and_sm_90) {
  for (const char* src : {kMmaKernels, kLdmatrixKernels, kDivergent})
    for (auto target : {nvrtc::Target::sass(8, 0), nvrtc::Target::sass(9, 0)}) {
      BOOST_TEST_CONTEXT(target.arch()) {
        std::string error;
        try {
          nvrtc::ProgramOptions options;
          options.flags = {"-default-device", "-std=c++17"};
          auto m = nvrtc::compile_program(src, "k.cu", target, options);
          BOOST_TEST(!m.cubin.empty());
        } catch (const std::exception& e) {
          error = e.what();
        }
        BOOST_TEST(error.empty(), error);
      }
    }
}

// ---- profiler -------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(the_profiler_counts_mma_and_models_the_tensor_core_peak) {
  Gpu gpu;
  std::string ptx = compile(R"(
extern "C" __global__ void chain16(float* d) {
  unsigned one = 0x3c003c00u;
  float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
#pragma unroll
  for (int i = 0; i < 64; ++i)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%4,%4,%4}, {%4,%4}, {%0,%1,%2,%3};"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(one));
  d[blockIdx.x * blockDim.x + threadIdx.x] = d0;
}
extern "C" __global__ void chain_tf32(float* d) {
  unsigned one = 0x3f800000u;
  float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
#pragma unroll
  for (int i = 0; i < 32; ++i)
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
                 "{%4,%4,%4,%4}, {%4,%4}, {%0,%1,%2,%3};"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(one));
  d[blockIdx.x * blockDim.x + threadIdx.x] = d0;
}
)");
  DevicePtr d = gpu.zeros<float>(64 * 64);
  vgpu::set_profiling(true);
  vgpu::clear_profiles();
  gpu.run(ptx, "chain16", Dim3{64}, Dim3{64}, 0, d);
  gpu.run(ptx, "chain_tf32", Dim3{8}, Dim3{64}, 0, d);
  vgpu::set_profiling(false);
  BOOST_TEST_REQUIRE(vgpu::profiles().size() == 2u);
  const auto& f16 = vgpu::profiles()[0];
  const auto& tf32 = vgpu::profiles()[1];
  // 64 blocks x 2 warps x 64 mma; each m16n8k16 is 2 x 16 x 8 x 16 = 4096 flops.
  BOOST_TEST(f16.mma_instructions == 64u * 2 * 64);
  BOOST_TEST(f16.mma_flops_f16 == 64ull * 2 * 64 * 4096);
  BOOST_TEST(f16.mma_flops_tf32 == 0u);
  BOOST_TEST(f16.thread_instructions < 2 * 32 * f16.mma_instructions);
  // 8 blocks x 2 warps x 32 mma of m16n8k8: 2 x 16 x 8 x 8 = 2048 flops each.
  BOOST_TEST(tf32.mma_instructions == 8u * 2 * 32);
  BOOST_TEST(tf32.mma_flops_tf32 == 8ull * 2 * 32 * 2048);
  BOOST_TEST(tf32.mma_flops_f16 == 0u);
  // The chains are all tensor-core work (fewer than 4 other instructions per mma, 16 KB
  // stored): the modeled time is the launch plus the flops at the H100's dense peaks,
  // 989.4 TFLOP/s for f16 and 494.7 for tf32.
  double f16_us = 64.0 * 2 * 64 * 4096 / 989.4e6, tf32_us = 8.0 * 2 * 32 * 2048 / 494.7e6;
  BOOST_TEST(f16.modeled_h100_us() == 3.0 + f16_us, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(tf32.modeled_h100_us() == 3.0 + tf32_us, boost::test_tools::tolerance(1e-12));
  // Every D element of the f16 chain: 64 mma of 16 products 1 x 1.
  auto out = gpu.download<float>(d, 64);
  BOOST_TEST(out[0] == 8.0f * 32);  // the tf32 chain wrote last: 32 mma of 8 products
  std::string table = vgpu::profile_table(vgpu::profiles());
  BOOST_TEST(mentions(table, " mma "), table);
  BOOST_TEST(mentions(table, std::to_string(64 * 2 * 64)), table);
}

BOOST_AUTO_TEST_CASE(ldmatrix_is_one_shared_request_per_warp) {
  // x4: 32 rows of 16 bytes, contiguous: one request of 512 bytes, 4 wavefronts (3 beyond the
  // first). x1: 8 rows (128 bytes), one wavefront; the other lanes give no address.
  Gpu gpu;
  std::string ptx = compile(R"(
extern "C" __global__ void rows(unsigned* out, int x4) {
  __shared__ __align__(16) unsigned short s[32 * 8];
  for (int i = threadIdx.x; i < 32 * 8; i += 32) s[i] = (unsigned short)i;
  __syncwarp();
  unsigned a = (unsigned)__cvta_generic_to_shared(&s[threadIdx.x * 8]);
  unsigned r0 = 0, r1 = 0, r2 = 0, r3 = 0;
  if (x4)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r0) : "r"(a));
  out[threadIdx.x] = r0 + r1 + r2 + r3;
})");
  DevicePtr out = gpu.zeros<std::uint32_t>(32);
  for (int x4 = 0; x4 < 2; ++x4) {
    vgpu::set_profiling(true);
    vgpu::clear_profiles();
    gpu.run(ptx, "rows", Dim3{1}, Dim3{32}, 0, out, x4);
    vgpu::set_profiling(false);
    BOOST_TEST_REQUIRE(vgpu::profiles().size() == 1u);
    const auto& p = vgpu::profiles()[0];
    // 8 store requests filling s (32 lanes x 2 bytes each), then the ldmatrix.
    BOOST_TEST(p.shared_requests == 8u + 1u, "x4 " << x4);
    BOOST_TEST(p.bank_conflicts == (x4 ? 3u : 0u), "x4 " << x4);
  }
}

BOOST_AUTO_TEST_SUITE_END()
