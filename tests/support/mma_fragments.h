// Tensor-core test support: hand-written f16/bf16/tf32 encoders, the PTX ISA's mma fragment
// layouts as it writes them (9.7.14.5), a scalar reference matmul, register packing, and the
// mma and ldmatrix kernels and the mma runner, shared by the mma and ldmatrix suites of the virtual
// GPU.
#pragma once

#include <bit>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "support/float_bits.h"
#include "support/vgpu_harness.h"

namespace kiln::test::mma {

// ---- encoders, written apart from the interpreter's ---------------------------------------

// f16 / bf16 bits of `v`, which must be exactly representable (tests/support/float_bits.h
// encodes them from the IEEE layouts, apart from the interpreter's conversions).
inline std::uint16_t f16_exact(double v) {
  std::uint16_t bits = kiln::test::f16_bits(v);
  BOOST_REQUIRE(kiln::test::f16_value(bits) == v);
  return bits;
}
inline std::uint16_t bf16_exact(double v) {
  std::uint16_t bits = kiln::test::bf16_bits(v);
  BOOST_REQUIRE(kiln::test::bf16_value(bits) == v);
  return bits;
}
using kiln::test::f16_value;

// tf32 by cvt.rna: nearest of the f32's values with 10 significand bits, ties away from zero.
inline float tf32_rna(float f) {
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
inline int group_id(int lane) {
  return lane >> 2;
}
inline int tig(int lane) {  // threadID_in_group
  return lane % 4;
}

// m16n8k16, .f16 / .bf16 A: "row = groupID for ai where 0 <= i < 2 || 4 <= i < 6, groupID + 8
// otherwise; col = (threadID_in_group * 2) + (i & 0x1) for ai where i < 4, ... + 8 for i >= 4".
inline Rc a_k16(int lane, int i) {
  int row = (i < 2 || (4 <= i && i < 6)) ? group_id(lane) : group_id(lane) + 8;
  int col = i < 4 ? tig(lane) * 2 + (i & 1) : tig(lane) * 2 + (i & 1) + 8;
  return {row, col};
}
// m16n8k16 B: "row = (threadID_in_group * 2) + (i & 0x1) for bi where i < 2, ... + 8 for i >= 2;
// col = groupID".
inline Rc b_k16(int lane, int i) {
  return {i < 2 ? tig(lane) * 2 + (i & 1) : tig(lane) * 2 + (i & 1) + 8, group_id(lane)};
}
// m16n8k8, .f16 / .bf16 A: "row = groupID for a0 and a1, groupID + 8 for a2 and a3;
// col = threadID_in_group * 2 + (i & 0x1)".
inline Rc a_k8(int lane, int i) {
  return {i < 2 ? group_id(lane) : group_id(lane) + 8, tig(lane) * 2 + (i & 1)};
}
// m16n8k8 B: "row = (threadID_in_group * 2) + i for bi where i = {0, 1}; col = groupID".
inline Rc b_k8(int lane, int i) {
  return {tig(lane) * 2 + i, group_id(lane)};
}
// m16n8k8 .tf32 A: "row = groupID for a0 and a2, groupID + 8 for a1 and a3;
// col = threadID_in_group for a0 and a1, threadID_in_group + 4 for a2 and a3".
inline Rc a_k8_tf32(int lane, int i) {
  return {(i == 0 || i == 2) ? group_id(lane) : group_id(lane) + 8,
          (i == 0 || i == 1) ? tig(lane) : tig(lane) + 4};
}
// m16n8k8 .tf32 B: "row = threadID_in_group for b0, threadID_in_group + 4 for b1; col = groupID".
inline Rc b_k8_tf32(int lane, int i) {
  return {i == 0 ? tig(lane) : tig(lane) + 4, group_id(lane)};
}
// m16n8k4 .tf32 A: "row = groupID for a0, groupID + 8 for a1; col = threadID_in_group".
inline Rc a_k4_tf32(int lane, int i) {
  return {i == 0 ? group_id(lane) : group_id(lane) + 8, tig(lane)};
}
// m16n8k4 .tf32 B: "row = threadID_in_group; col = groupID".
inline Rc b_k4_tf32(int lane, int) {
  return {tig(lane), group_id(lane)};
}
// C / D of every shape: "row = groupID for ci where i < 2, groupID + 8 for i >= 2;
// col = (threadID_in_group * 2) + (i & 0x1)".
inline Rc acc(int lane, int i) {
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
inline std::vector<double> reference(const Problem& p) {
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
inline std::vector<double> dyadic(std::size_t count, std::uint32_t& seed) {
  std::vector<double> v(count);
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = static_cast<double>(static_cast<int>(seed >> 26) - 32) / 16.0;
  }
  return v;
}

// Half an ulp of f32 at `v`'s magnitude (normal range).
inline double half_ulp(double v) {
  int e = v == 0 ? -126 : std::max(std::ilogb(static_cast<float>(v)), -126);
  return std::ldexp(1.0, e - 24);
}

enum class In { f16, bf16, tf32 };

inline std::uint32_t element_bits(In in, double v) {
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
inline std::vector<std::uint32_t> pack(In in, const std::vector<double>& m, int cols, int count,
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

inline const char* const kMmaKernels = R"(
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

inline std::vector<std::vector<double>> run_mma(Gpu& gpu, const std::string& ptx, const MmaCase& mc,
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

inline std::vector<Problem> dyadic_problems(int warps, int k, std::uint32_t seed) {
  std::vector<Problem> ps;
  for (int w = 0; w < warps; ++w)
    ps.push_back(Problem{k, dyadic(static_cast<std::size_t>(16 * k), seed),
                         dyadic(static_cast<std::size_t>(k * 8), seed), dyadic(128, seed)});
  return ps;
}

// Four 8 x 8 matrices of 16-bit codes in shared memory, each row 48 bytes after the one stored
// before it and matrix rows stored in the order 0, 3, 6, 1, 4, 7, 2, 5: lane L gives the address
// of row L % 8 of matrix L / 8, so a lane whose address were ignored or misread shows.
inline const char* const kLdmatrixKernels = R"(
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

}  // namespace kiln::test::mma
