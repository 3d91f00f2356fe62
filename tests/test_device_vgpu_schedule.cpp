// Schedule fuzzing on the virtual GPU (KILN_VGPU_SCHEDULE=random:SEED): a kernel that depends
// on the in-order schedule gives a wrong answer on some seed, correct kernels give the same
// answer on every seed, blocks run in a shuffled order, and a bad value is an error.
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <functional>
#include <string>

#include "support/scoped_env.h"
#include "support/vgpu_harness.h"

using namespace kiln;
using namespace kiln::test;

namespace {

std::string seed_value(int seed) {
  return "random:" + std::to_string(seed);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(vgpu_schedule)

BOOST_AUTO_TEST_CASE(a_missing_barrier_shows_under_some_random_schedule) {
  // Each thread reads its left neighbour's shared slot with no barrier: in order, thread t-1
  // has always finished before thread t starts, so the answer is right by luck.
  const char* src = R"(
extern "C" __global__ void left(int* out) {
  __shared__ int s[128];
  s[threadIdx.x] = threadIdx.x + 1;
  out[threadIdx.x] = threadIdx.x > 0 ? s[threadIdx.x - 1] : 0;
}
)";
  Gpu gpu;
  std::string ptx = compile(src);
  DevicePtr out = gpu.zeros<int>(128);
  ScopedEnv none("KILN_VGPU_CHECK", "none");
  auto correct = [&] {
    gpu.run(ptx, "left", Dim3{1}, Dim3{128}, 0, out);
    auto got = gpu.download<int>(out, 128);
    for (int i = 0; i < 128; ++i)
      if (got[static_cast<std::size_t>(i)] != i) return false;
    return true;
  };
  {
    ScopedEnv in_order("KILN_VGPU_SCHEDULE", "in_order");
    BOOST_TEST(correct());
  }
  int wrong = 0;
  for (int seed = 1; seed <= 5; ++seed) {
    ScopedEnv random("KILN_VGPU_SCHEDULE", seed_value(seed).c_str());
    wrong += !correct();
  }
  BOOST_TEST(wrong > 0);
  // With racecheck on, the random schedule turns the wrong answer into a report.
  ScopedEnv race("KILN_VGPU_CHECK", "race");
  ScopedEnv random("KILN_VGPU_SCHEDULE", "random:1");
  std::string msg;
  try {
    gpu.run(ptx, "left", Dim3{1}, Dim3{128}, 0, out);
  } catch (const std::exception& e) {
    msg = e.what();
  }
  BOOST_TEST((msg.find("RAW hazard on shared memory") != std::string::npos ||
              msg.find("WAR hazard on shared memory") != std::string::npos),
             msg);
}

BOOST_AUTO_TEST_CASE(correct_kernels_give_the_same_answer_on_every_seed) {
  const char* src = R"(
extern "C" __global__ void reduce(const int* in, int* out, int* total) {
  __shared__ int s[256];
  int t = threadIdx.x;
  s[t] = in[blockIdx.x * 256 + t];
  __syncthreads();
  for (int stride = 128; stride >= 32; stride >>= 1) {
    if (t < stride) s[t] += s[t + stride];
    __syncthreads();
  }
  if (t < 32) {
    int v = s[t];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (t == 0) {
      out[blockIdx.x] = v;
      atomicAdd(total, v);
    }
  }
}
)";
  Gpu gpu;
  std::string ptx = compile(src);
  std::vector<int> data(4 * 256);
  std::uint32_t state = 7;
  for (auto& v : data) v = static_cast<int>((state = state * 1664525u + 1013904223u) >> 20);
  DevicePtr in = gpu.upload(data), out = gpu.zeros<int>(4), total = gpu.zeros<int>(1);
  ScopedEnv checks("KILN_VGPU_CHECK", "race,init");
  std::vector<int> want;
  for (int seed = 0; seed <= 5; ++seed) {
    ScopedEnv schedule("KILN_VGPU_SCHEDULE", seed == 0 ? "in_order" : seed_value(seed).c_str());
    gpu.b->memset8(total, 0, sizeof(int));
    gpu.run(ptx, "reduce", Dim3{4}, Dim3{256}, 0, in, out, total);
    auto got = gpu.download<int>(out, 4);
    got.push_back(gpu.download<int>(total, 1)[0]);
    if (seed == 0)
      want = got;
    else
      BOOST_TEST(got == want, "seed " << seed);
  }
  long expect = 0;
  for (int v : data) expect += v;
  BOOST_TEST(want[4] == expect);
}

BOOST_AUTO_TEST_CASE(blocks_run_in_a_shuffled_order) {
  const char* src = R"(
extern "C" __global__ void ticket(unsigned* next, unsigned* order) {
  if (threadIdx.x == 0) order[blockIdx.x] = atomicAdd(next, 1u);
}
)";
  Gpu gpu;
  std::string ptx = compile(src);
  DevicePtr next = gpu.zeros<unsigned>(1), order = gpu.zeros<unsigned>(16);
  auto run = [&](const char* schedule) {
    ScopedEnv s("KILN_VGPU_SCHEDULE", schedule);
    gpu.b->memset8(next, 0, sizeof(unsigned));
    gpu.run(ptx, "ticket", Dim3{16}, Dim3{32}, 0, next, order);
    return gpu.download<unsigned>(order, 16);
  };
  std::vector<unsigned> in_order = run("in_order");
  for (unsigned i = 0; i < 16; ++i) BOOST_TEST(in_order[i] == i);
  std::vector<unsigned> shuffled = run("random:3");
  BOOST_TEST(shuffled != in_order);
  BOOST_TEST(run("random:3") == shuffled);  // the same seed, the same schedule
}

BOOST_AUTO_TEST_CASE(a_bad_schedule_is_an_error) {
  Gpu gpu;
  std::string ptx = compile(R"(extern "C" __global__ void k() {})");
  ScopedEnv bogus("KILN_VGPU_SCHEDULE", "random");
  std::string msg;
  try {
    gpu.run(ptx, "k", Dim3{1}, Dim3{1}, 0);
  } catch (const std::exception& e) {
    msg = e.what();
  }
  BOOST_TEST(
      msg.find("KILN_VGPU_SCHEDULE: 'random' is not in_order or random:SEED") != std::string::npos,
      msg);
}

BOOST_AUTO_TEST_SUITE_END()
