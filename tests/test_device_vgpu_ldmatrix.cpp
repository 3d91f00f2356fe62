// ldmatrix on the virtual GPU (.x1 .x2 .x4, with and without .trans) against the fragments the
// PTX ISA shows (9.7.14.5.15), ldmatrix feeding mma as FlashAttention kernels do, and the
// profiler's tensor-core counts and modeled time against hand-computed figures.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/cuda/virtual/profiler.h"
#include "support/mma_fragments.h"
#include "support/profiling_scope.h"

using namespace kiln;
using namespace kiln::test;
using namespace kiln::test::mma;
namespace vgpu = kiln::cuda::vgpu;

BOOST_AUTO_TEST_SUITE(vgpu_ldmatrix)
// ---- ldmatrix -------------------------------------------------------------------------------

namespace {

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
  test::ProfilingScope profiling;
  gpu.run(ptx, "chain16", Dim3{64}, Dim3{64}, 0, d);
  gpu.run(ptx, "chain_tf32", Dim3{8}, Dim3{64}, 0, d);
  profiling.stop();
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
    test::ProfilingScope profiling;
    gpu.run(ptx, "rows", Dim3{1}, Dim3{32}, 0, out, x4);
    profiling.stop();
    BOOST_TEST_REQUIRE(vgpu::profiles().size() == 1u);
    const auto& p = vgpu::profiles()[0];
    // 8 store requests filling s (32 lanes x 2 bytes each), then the ldmatrix.
    BOOST_TEST(p.shared_requests == 8u + 1u, "x4 " << x4);
    BOOST_TEST(p.bank_conflicts == (x4 ? 3u : 0u), "x4 " << x4);
  }
}

BOOST_AUTO_TEST_SUITE_END()
