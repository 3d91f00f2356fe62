// The virtual GPU's profiler: global bytes, warp-level requests and 32-byte sectors, shared bank
// conflicts and atomics of small kernels whose counts follow from their access pattern by hand.
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "runtime/cuda/virtual/decoder.h"
#include "runtime/cuda/virtual/issue_cost.h"
#include "runtime/cuda/virtual/profiler.h"
#include "support/vgpu_harness.h"
#include "support/profiling_scope.h"

using namespace kiln;
using namespace kiln::test;
namespace vgpu = kiln::cuda::vgpu;

namespace {

const char* kKernels = R"(
extern "C" __global__ void copy(const float* in, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = in[i];
}
extern "C" __global__ void strided(const float* in, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = in[i * 32];
}
extern "C" __global__ void broadcast(const float* in, float* out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = in[0];
}
extern "C" __global__ void vector4(const float4* in, float4* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = in[i];
}
extern "C" __global__ void banks(float* out, int stride) {
  __shared__ float s[32 * 32];
  int i = threadIdx.x * stride;
  i = (i + i / 1024) % 1024;  // past the array: shift a bank rather than collide
  s[i] = threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = s[i];
}
extern "C" __global__ void wrapped(const float4* in, float4* out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = in[threadIdx.x % 16];
}
extern "C" __global__ void diverge(const float* in, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = i % 2 == 0 ? 1.0f : in[i];
}
extern "C" __global__ void shared_vector4(float4* out) {
  __shared__ float4 s[256];
  s[threadIdx.x] = make_float4(threadIdx.x, 1, 2, 3);
  __syncthreads();
  out[threadIdx.x] = s[255 - threadIdx.x];
}
extern "C" __global__ void count(int* counter) {
  atomicAdd(counter, 1);
}
)";

// Runs one launch with the profiler on and returns its profile.
template <class... Args>
vgpu::KernelProfile profile(Gpu& gpu, const std::string& ptx, const char* name, Dim3 grid,
                            Dim3 block, Args... args) {
  test::ProfilingScope profiling;
  gpu.run(ptx, name, grid, block, 0, args...);
  profiling.stop();
  BOOST_TEST_REQUIRE(vgpu::profiles().size() == 1u);
  return vgpu::profiles()[0];
}

}  // namespace

BOOST_AUTO_TEST_SUITE(vgpu_profiler)

BOOST_AUTO_TEST_CASE(a_coalesced_copy_moves_four_sectors_per_warp_request) {
  Gpu gpu;
  std::string ptx = compile(kKernels);
  DevicePtr in = gpu.upload(std::vector<float>(1024 * 32, 1.0f)), out = gpu.zeros<float>(1024);
  auto p = profile(gpu, ptx, "copy", Dim3{4}, Dim3{256}, in, out);
  BOOST_TEST(p.kernel == "copy");
  BOOST_TEST(p.load_bytes == 4096u);
  BOOST_TEST(p.store_bytes == 4096u);
  BOOST_TEST(p.load_requests == 32u);  // 1024 threads / 32 per warp
  BOOST_TEST(p.store_requests == 32u);
  BOOST_TEST(p.load_sectors == 128u);  // 32 lanes x 4 bytes = 128 bytes = 4 sectors
  BOOST_TEST(p.store_sectors == 128u);
  BOOST_TEST(p.dram_bytes() == 8192u);
  BOOST_TEST(p.thread_instructions > 0u);
  BOOST_TEST(p.bank_conflicts == 0u);
  BOOST_TEST(p.atomics == 0u);

  // A 128-byte stride puts every lane in its own sector.
  auto s = profile(gpu, ptx, "strided", Dim3{4}, Dim3{256}, in, out);
  BOOST_TEST(s.load_bytes == 4096u);
  BOOST_TEST(s.load_sectors == 32u * 32u);
  BOOST_TEST(s.store_sectors == 128u);

  // Every lane reading one address is one sector per request.
  auto b = profile(gpu, ptx, "broadcast", Dim3{4}, Dim3{256}, in, out);
  BOOST_TEST(b.load_sectors == 32u);
  BOOST_TEST(b.load_requests == 32u);
  // ... and all of them the same sector: DRAM sends it once, L1 serves the rest.
  BOOST_TEST(b.dram_load_sectors == 1u);
  BOOST_TEST(s.dram_load_sectors == 32u * 32u);

  // 16-byte loads: a warp's request covers 512 bytes, 16 sectors, in a quarter of the requests.
  auto v = profile(gpu, ptx, "vector4", Dim3{1}, Dim3{256}, in, out);
  BOOST_TEST(v.load_bytes == 4096u);
  BOOST_TEST(v.load_requests == 8u);
  BOOST_TEST(v.load_sectors == 128u);
}

BOOST_AUTO_TEST_CASE(shared_bank_conflicts_follow_the_stride) {
  Gpu gpu;
  std::string ptx = compile(kKernels);
  DevicePtr out = gpu.zeros<float>(256);
  // Stride 1: 32 lanes in 32 banks. Stride 2: two words per bank, one extra wavefront.
  // Stride 32: all 32 lanes in bank 0, 31 extra wavefronts. 8 warps, one store and one load.
  for (auto [stride, conflicts] : {std::pair{1, 0}, std::pair{2, 1}, std::pair{32, 31}}) {
    BOOST_TEST_CONTEXT("stride " << stride) {
      auto p = profile(gpu, ptx, "banks", Dim3{1}, Dim3{256}, out, stride);
      BOOST_TEST(p.shared_requests == 16u);
      BOOST_TEST(p.bank_conflicts == 16u * static_cast<unsigned>(conflicts));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_request_pays_for_each_distinct_sector_once) {
  Gpu gpu;
  std::string ptx = compile(kKernels);
  DevicePtr in = gpu.upload(std::vector<float>(1024, 1.0f)), out = gpu.zeros<float>(1024);
  // Lanes 16-31 read again the 16 float4 (256 bytes, 8 sectors) that lanes 0-15 read.
  auto w = profile(gpu, ptx, "wrapped", Dim3{1}, Dim3{256}, in, out);
  BOOST_TEST(w.load_requests == 8u);
  BOOST_TEST(w.load_bytes == 256u * 16u);
  BOOST_TEST(w.load_sectors == 8u * 8u);
  BOOST_TEST(w.dram_load_sectors == 8u);
  BOOST_TEST(w.store_sectors == 8u * 16u);

  // Even lanes store at once, odd lanes load first: a warp's first request mixes 16 stores and
  // 16 loads, 8 bytes apart, so 4 sectors of each; the odd lanes' stores add 4 more.
  auto d = profile(gpu, ptx, "diverge", Dim3{1}, Dim3{64}, in, out);
  BOOST_TEST(d.load_bytes == 32u * 4u);
  BOOST_TEST(d.store_bytes == 64u * 4u);
  BOOST_TEST(d.load_sectors == 2u * 4u);
  BOOST_TEST(d.store_sectors == 2u * 8u);
}

BOOST_AUTO_TEST_CASE(wide_shared_accesses_take_a_wavefront_per_word_in_a_bank) {
  Gpu gpu;
  std::string ptx = compile(kKernels);
  DevicePtr out = gpu.zeros<float>(1024);
  // A warp's 32 float4 are 128 consecutive words, 4 in every bank: 4 wavefronts, 3 beyond the
  // first, for the store and for the (reversed, still consecutive) load of each of 8 warps.
  auto p = profile(gpu, ptx, "shared_vector4", Dim3{1}, Dim3{256}, out);
  BOOST_TEST(p.shared_requests == 16u);
  BOOST_TEST(p.bank_conflicts == 16u * 3u);
  std::vector<float> got = gpu.download<float>(out, 1024);
  BOOST_TEST(got[0] == 255.0f);
  BOOST_TEST(got[4 * 255] == 0.0f);
}

BOOST_AUTO_TEST_CASE(atomics_are_counted_per_thread) {
  Gpu gpu;
  std::string ptx = compile(kKernels);
  DevicePtr counter = gpu.zeros<int>(1);
  auto p = profile(gpu, ptx, "count", Dim3{3}, Dim3{64}, counter);
  BOOST_TEST(p.atomics == 192u);
  BOOST_TEST(gpu.download<int>(counter, 1)[0] == 192);
}

BOOST_AUTO_TEST_CASE(the_table_names_each_kernel_and_labels_the_model) {
  Gpu gpu;
  std::string ptx = compile(kKernels);
  DevicePtr in = gpu.upload(std::vector<float>(1024 * 32, 1.0f)), out = gpu.zeros<float>(1024);
  test::ProfilingScope profiling;
  gpu.run(ptx, "copy", Dim3{4}, Dim3{256}, 0, in, out);
  gpu.run(ptx, "copy", Dim3{4}, Dim3{256}, 0, in, out);
  gpu.run(ptx, "broadcast", Dim3{4}, Dim3{256}, 0, in, out);
  profiling.stop();
  std::string table = vgpu::profile_table(vgpu::profiles());
  BOOST_TEST(table.find("copy") != std::string::npos, table);
  BOOST_TEST(table.find("broadcast") != std::string::npos, table);
  BOOST_TEST(table.find("modeled") != std::string::npos, table);
  // Two copies: 2 x 8192 DRAM bytes; the modeled time pays one launch latency each (3 us) on
  // top of 16384 B / 3.35 TB/s.
  const auto& first = vgpu::profiles()[0];
  BOOST_TEST(first.modeled_h100_us() >= 3.0);
  BOOST_TEST(first.modeled_h100_us() < 3.1);
}

// Hand-written PTX, so that the instructions each thread executes are known: their costs in
// quarter issue slots on cc 9.0 (CUDA C++ Programming Guide's throughput table: FP32 128 per SM
// per clock = 4, 32-bit integer 64 = 8, conversions and MUFU 16 = 32, load/store units 32 = 16).
const char* kWeighted = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry weighted(.param .u64 out, .param .u32 a, .param .u32 b)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<4>;
  .reg .f32 %f<4>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r1, [a];
  ld.param.u32 %r2, [b];
  cvta.to.global.u64 %rd2, %rd1;
  mov.u32 %r0, %tid.x;
  rem.u32 %r3, %r1, %r2;
  cvt.rn.f32.u32 %f1, %r3;
  fma.rn.f32 %f2, %f1, %f1, %f1;
  rsqrt.approx.f32 %f3, %f2;
  mul.wide.u32 %rd3, %r0, 4;
  add.s64 %rd3, %rd2, %rd3;
  st.global.f32 [%rd3], %f3;
  ret;
}
)";

BOOST_AUTO_TEST_CASE(instructions_are_weighted_by_their_issue_cost) {
  Gpu gpu;
  DevicePtr out = gpu.zeros<float>(128);
  auto p = profile(gpu, kWeighted, "weighted", Dim3{1}, Dim3{128}, out, 7u, 4u);
  // Per thread: 3 ld.param and cvta (folded by ptxas: 0); the %tid.x read (S2R) 8; rem.u32 =
  // I2F + MUFU.RCP + F2I + 15 integer instructions = 3 x 32 + 15 x 8 = 216; cvt 32; fma 4;
  // rsqrt 32; mul.wide (IMAD.WIDE) 16; add.s64 (two 32-bit adds) 16; st.global 16; ret 16.
  const std::uint64_t per_thread = 0 + 8 + 216 + 32 + 4 + 32 + 16 + 16 + 16 + 16;
  BOOST_TEST(p.thread_instructions == 128u * 13u);  // the raw count is unchanged
  BOOST_TEST(p.issue_quarters == 128u * per_thread);
  BOOST_TEST(p.issue_slots() == 128.0 * per_thread / 4.0);
  // (7 % 4)^2 + 3 = 12; rsqrt(12).
  BOOST_TEST(gpu.download<float>(out, 128)[77] == 1.0f / std::sqrt(12.0f),
             boost::test_tools::tolerance(1e-6f));
  // 128 threads x 89 slots against 16 sectors: issue bound.
  BOOST_TEST((p.bound() == vgpu::KernelProfile::Bound::issue));
  BOOST_TEST(p.issue_us() == 128.0 * per_thread / 4.0 / (132.0 * 128 * 1980),
             boost::test_tools::tolerance(1e-9));
  BOOST_TEST(p.modeled_h100_us() == 3.0 + p.issue_us(), boost::test_tools::tolerance(1e-9));

  // A coalesced copy moves 4 bytes a thread for a handful of slots: memory bound.
  std::string ptx = compile(kKernels);
  DevicePtr in = gpu.upload(std::vector<float>(1024 * 32, 1.0f)), dst = gpu.zeros<float>(1024);
  auto c = profile(gpu, ptx, "copy", Dim3{4}, Dim3{256}, in, dst);
  BOOST_TEST((c.bound() == vgpu::KernelProfile::Bound::memory));
}

BOOST_AUTO_TEST_CASE(the_cost_table_has_a_column_per_architecture) {
  // cc 8.0 issues FP32 at 64 per SM per clock, cc 9.0 at 128; MUFU is 16 on both.
  auto cost = [](const char* opcode, vgpu::CostArch arch) {
    vgpu::OpcodeParts info(opcode);
    vgpu::Instr in;
    in.space = vgpu::Space::global;
    return static_cast<unsigned>(vgpu::issue_cost(info, in, arch));
  };
  BOOST_TEST(cost("fma.rn.f32", vgpu::CostArch::sm90) == 4u);
  BOOST_TEST(cost("fma.rn.f32", vgpu::CostArch::sm80) == 8u);
  BOOST_TEST(cost("ex2.approx.f32", vgpu::CostArch::sm90) == 32u);
  BOOST_TEST(cost("ex2.approx.f32", vgpu::CostArch::sm80) == 32u);
  BOOST_TEST(cost("add.f64", vgpu::CostArch::sm90) == 8u);
  BOOST_TEST(cost("add.f64", vgpu::CostArch::sm80) == 16u);
  // A 128-bit load is one instruction: the same cost as a 32-bit one, for four times the bytes.
  BOOST_TEST(cost("ld.global.v4.f32", vgpu::CostArch::sm90) ==
             cost("ld.global.f32", vgpu::CostArch::sm90));
  // One f32 -> bf16x2 conversion rounds two values for the cost of one.
  BOOST_TEST(cost("cvt.rn.bf16x2.f32", vgpu::CostArch::sm90) ==
             cost("cvt.rn.bf16.f32", vgpu::CostArch::sm90));
  // 64-bit remainder: I2F, MUFU, F2I + 68 integer instructions, against 15 for 32-bit.
  BOOST_TEST(cost("rem.u64", vgpu::CostArch::sm90) == 96u + 68u * 8u);
  BOOST_TEST(cost("rem.u32", vgpu::CostArch::sm90) == 96u + 15u * 8u);
}

BOOST_AUTO_TEST_SUITE_END()
