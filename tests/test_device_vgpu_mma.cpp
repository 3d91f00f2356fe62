// Tensor-core instructions on the virtual GPU: mma.sync (m16n8k16 / m16n8k8 / m16n8k4 with f16,
// bf16 and tf32 inputs, f32 and f16 accumulators) and cvt to tf32, against a scalar matmul and
// the fragment layouts of the PTX ISA (9.7.14.5 "Matrix Fragments for mma.m16n8k16 / m16n8k8 /
// m16n8k4"), transcribed in support/mma_fragments.h as the ISA states them; faults of warps
// that are not converged, and the NVRTC builds. ldmatrix and the profiler's counts:
// test_device_vgpu_ldmatrix.cpp.
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
#include "support/mma_fragments.h"

using namespace kiln;
using namespace kiln::test;
using namespace kiln::test::mma;
namespace vgpu = kiln::cuda::vgpu;

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

BOOST_AUTO_TEST_SUITE_END()
