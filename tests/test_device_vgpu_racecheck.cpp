// Shared-memory racecheck and initcheck on the virtual GPU (KILN_VGPU_CHECK=race,init): kernels
// with the classic bugs are reported with both threads, both PTX lines and the hazard kind;
// correct kernels (barriers, warp synchronization, warp shuffles, atomics) are not.
#include <boost/test/unit_test.hpp>

#include <cstdlib>

#include "support/scoped_env.h"
#include "support/vgpu_harness.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// Sets KILN_VGPU_CHECK for one scope.
struct CheckMode : ScopedEnv {
  explicit CheckMode(const char* mode) : ScopedEnv("KILN_VGPU_CHECK", mode) {}
};

const char* kTreeReduction = R"(
extern "C" __global__ void tree(const int* in, int* out) {
  __shared__ int s[256];
  int t = threadIdx.x;
  s[t] = in[t];
  SYNC;
  for (int stride = 128; stride > 0; stride >>= 1) {
    if (t < stride) s[t] += s[t + stride];
    SYNC;
  }
  if (t == 0) *out = s[0];
}
)";

int run_tree(Gpu& gpu, const std::string& ptx) {
  std::vector<int> values(256);
  for (int i = 0; i < 256; ++i) values[i] = i;
  DevicePtr in = gpu.upload(values), out = gpu.zeros<int>(1);
  gpu.run(ptx, "tree", Dim3{1}, Dim3{256}, 0, in, out);
  return gpu.download<int>(out, 1)[0];
}

}  // namespace

BOOST_AUTO_TEST_SUITE(vgpu_racecheck)

BOOST_AUTO_TEST_CASE(a_tree_reduction_without_barriers_is_a_raw_hazard) {
  Gpu gpu;
  std::string good = compile(std::string("#define SYNC __syncthreads()\n") + kTreeReduction);
  std::string bad = compile(std::string("#define SYNC\n") + kTreeReduction);
  CheckMode race("race");
  BOOST_TEST(run_tree(gpu, good) == 32640);
  std::string msg = error_text([&] { run_tree(gpu, bad); });
  // Which of the two accesses comes first depends on the schedule: in order, thread 0 reads
  // before thread 1 writes (WAR); on hardware it may be the reverse (RAW).
  BOOST_TEST((mentions(msg, "racecheck: RAW hazard on shared memory") ||
              mentions(msg, "racecheck: WAR hazard on shared memory")),
             msg);
  BOOST_TEST(mentions(msg, "kernel 'tree' block (0,0,0)"), msg);
  BOOST_TEST(mentions(msg, "ld.shared"), msg);
  BOOST_TEST(mentions(msg, "st.shared"), msg);
  BOOST_TEST(mentions(msg, "PTX line"), msg);
}

BOOST_AUTO_TEST_CASE(reading_another_warps_write_needs_a_barrier) {
  const char* src = R"(
extern "C" __global__ void pass(float* out) {
  __shared__ float s[256];
  s[threadIdx.x] = threadIdx.x;
  SYNC;
  out[threadIdx.x] = s[(threadIdx.x + 32) % 256];
}
)";
  Gpu gpu;
  std::string good = compile(std::string("#define SYNC __syncthreads()\n") + src);
  std::string bad = compile(std::string("#define SYNC\n") + src);
  DevicePtr out = gpu.zeros<float>(256);
  CheckMode race("race");
  gpu.run(good, "pass", Dim3{1}, Dim3{256}, 0, out);
  BOOST_TEST(gpu.download<float>(out, 256)[0] == 32.0f);
  std::string msg = error_text([&] { gpu.run(bad, "pass", Dim3{1}, Dim3{256}, 0, out); });
  BOOST_TEST((mentions(msg, "RAW hazard") || mentions(msg, "WAR hazard")), msg);
  // The reader is thread 224..255 reading what thread 0..31 will write, or the reverse: the
  // message names both threads.
  BOOST_TEST(mentions(msg, "what thread ("), msg);
}

BOOST_AUTO_TEST_CASE(within_a_warp_only_warp_synchronization_orders_shared_accesses) {
  const char* src = R"(
extern "C" __global__ void swap(int* out) {
  __shared__ int s[32];
  int lane = threadIdx.x;
  s[lane] = lane * 10;
  SYNC;
  out[lane] = s[lane ^ 1];
}
)";
  Gpu gpu;
  std::string good = compile(std::string("#define SYNC __syncwarp()\n") + src);
  std::string bad = compile(std::string("#define SYNC\n") + src);
  DevicePtr out = gpu.zeros<int>(32);
  CheckMode race("race");
  gpu.run(good, "swap", Dim3{1}, Dim3{32}, 0, out);
  BOOST_TEST(gpu.download<int>(out, 32)[0] == 10);
  std::string msg = error_text([&] { gpu.run(bad, "swap", Dim3{1}, Dim3{32}, 0, out); });
  BOOST_TEST((mentions(msg, "RAW hazard") || mentions(msg, "WAR hazard")), msg);
}

BOOST_AUTO_TEST_CASE(shuffles_and_atomics_are_not_hazards) {
  const char* src = R"(
extern "C" __global__ void count(int* out) {
  __shared__ int total;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  int v = 1;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  atomicAdd(&total, 1);
  if ((threadIdx.x & 31) == 0) atomicAdd(&total, v);
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = total;  // one word per block: blocks do not race
}
)";
  Gpu gpu;
  std::string ptx = compile(src);
  DevicePtr out = gpu.zeros<int>(2);
  CheckMode checks("race,init");
  gpu.run(ptx, "count", Dim3{2}, Dim3{128}, 0, out);
  BOOST_TEST(gpu.download<int>(out, 2)[1] == 256);  // 128 ones + 4 warps of 32
}

BOOST_AUTO_TEST_CASE(a_staged_loop_with_one_barrier_too_few_is_a_hazard) {
  // One staging buffer needs two barriers per step: after the writes (before the reads) and
  // after the reads (before the next step's writes).
  const char* src = R"(
extern "C" __global__ void stages(const float* in, float* out, int steps) {
  __shared__ float buf[64];
  float acc = 0;
  for (int i = 0; i < steps; ++i) {
    buf[threadIdx.x] = in[i * 64 + threadIdx.x];
    __syncthreads();
    acc += buf[63 - threadIdx.x];
    SYNC;
  }
  out[threadIdx.x] = acc;
}
)";
  Gpu gpu;
  std::string good = compile(std::string("#define SYNC __syncthreads()\n") + src);
  std::string bad = compile(std::string("#define SYNC\n") + src);
  auto data = random_floats(64 * 4);
  DevicePtr in = gpu.upload(data), out = gpu.zeros<float>(64);
  CheckMode race("race");
  gpu.run(good, "stages", Dim3{1}, Dim3{64}, 0, in, out, 4);
  float want = 0;
  for (int i = 0; i < 4; ++i) want += data[i * 64 + 63];
  BOOST_TEST(std::abs(gpu.download<float>(out, 64)[0] - want) < 1e-5f);
  std::string msg = error_text([&] { gpu.run(bad, "stages", Dim3{1}, Dim3{64}, 0, in, out, 4); });
  // In order, warp 0 runs ahead and overwrites before warp 1 reads: reported as RAW.
  BOOST_TEST((mentions(msg, "RAW hazard") || mentions(msg, "WAR hazard")), msg);
  // The same buffer doubled needs only one barrier per step: no hazard.
  std::string doubled = compile(R"(
extern "C" __global__ void stages(const float* in, float* out, int steps) {
  __shared__ float buf[2][64];
  float acc = 0;
  for (int i = 0; i < steps; ++i) {
    buf[i & 1][threadIdx.x] = in[i * 64 + threadIdx.x];
    __syncthreads();
    acc += buf[i & 1][63 - threadIdx.x];
  }
  out[threadIdx.x] = acc;
}
)");
  BOOST_CHECK_NO_THROW(gpu.run(doubled, "stages", Dim3{1}, Dim3{64}, 0, in, out, 4));
}

BOOST_AUTO_TEST_CASE(initcheck_reports_a_read_nobody_wrote) {
  const char* src = R"(
extern "C" __global__ void tail(float* out, int n) {
  __shared__ float s[64];
  if (threadIdx.x < n) s[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];  // past n nobody wrote
}
)";
  Gpu gpu;
  std::string ptx = compile(src);
  DevicePtr out = gpu.zeros<float>(64);
  {
    CheckMode init("init");
    gpu.run(ptx, "tail", Dim3{1}, Dim3{64}, 0, out, 64);  // every element written
    std::string msg = error_text([&] { gpu.run(ptx, "tail", Dim3{1}, Dim3{64}, 0, out, 60); });
    BOOST_TEST(mentions(msg, "initcheck: read of uninitialized shared memory at offset 240"), msg);
    BOOST_TEST(mentions(msg, "thread (60,0,0)"), msg);
  }
  CheckMode race_only("race");
  BOOST_CHECK_NO_THROW(gpu.run(ptx, "tail", Dim3{1}, Dim3{64}, 0, out, 60));
}

BOOST_AUTO_TEST_CASE(an_unknown_check_is_an_error) {
  Gpu gpu;
  std::string ptx = compile(R"(extern "C" __global__ void k() {})");
  CheckMode bogus("race,speed");
  std::string msg = error_text([&] { gpu.run(ptx, "k", Dim3{1}, Dim3{1}, 0); });
  BOOST_TEST(mentions(msg, "KILN_VGPU_CHECK: unknown check 'speed'"), msg);
}

BOOST_AUTO_TEST_SUITE_END()
