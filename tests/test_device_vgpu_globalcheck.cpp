// Global- and local-memory racecheck and initcheck on the virtual GPU (KILN_VGPU_CHECK=race,init):
// cross-block and unsynchronized same-block hazards on global memory are reported with both
// blocks, threads, PTX lines and the offset into the allocation; atomics, fence-and-flag
// protocols and disjoint sub-word writes are not. Fresh allocations and local frames start
// uninitialized; copies, memsets and kernel stores initialize.
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <functional>

#include "support/scoped_env.h"
#include "support/vgpu_harness.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// A fresh device allocation nobody has written (owned by `gpu`).
DevicePtr fresh(Gpu& gpu, std::size_t bytes) {
  DevicePtr p = gpu.b->alloc(bytes);
  gpu.owned.push_back(p);
  return p;
}

}  // namespace

// Messages name the first thread to fault, which depends on the schedule: pin the in-order one
// (KILN_VGPU_SCHEDULE=random is exercised by test_device_vgpu_schedule).
struct InOrderSchedule {
  InOrderSchedule() { setenv("KILN_VGPU_SCHEDULE", "in_order", 1); }
};
BOOST_AUTO_TEST_SUITE(vgpu_globalcheck, *boost::unit_test::fixture<InOrderSchedule>())

BOOST_AUTO_TEST_CASE(reading_another_blocks_write_is_a_cross_block_raw_hazard) {
  // Each block fills its slice; thread 0 then adds its left neighbour's last element, which
  // another block wrote: nothing orders the two blocks.
  const char* src = R"(
extern "C" __global__ void prefix(float* x) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  x[i] = 1.0f;
  __syncthreads();
  if (threadIdx.x == 0 && blockIdx.x > 0) x[i] += x[i - 1];
}
)";
  Gpu gpu;
  std::string ptx = compile(src);
  DevicePtr x = gpu.zeros<float>(256);
  ScopedEnv race("KILN_VGPU_CHECK", "race");
  std::string msg = error_text([&] { gpu.run(ptx, "prefix", Dim3{4}, Dim3{64}, 0, x); });
  BOOST_TEST(mentions(msg, "racecheck: RAW hazard on global memory"), msg);
  BOOST_TEST(mentions(msg, "(offset 252 in allocation"), msg);
  BOOST_TEST(mentions(msg, "kernel 'prefix' block (1,0,0) thread (0,0,0)"), msg);
  BOOST_TEST(mentions(msg, "what block (0,0,0) thread (63,0,0) wrote"), msg);
  BOOST_TEST(mentions(msg, "ld.global"), msg);
  BOOST_TEST(mentions(msg, "st.global"), msg);
  BOOST_TEST(mentions(msg, "different blocks of one launch are unordered"), msg);
  // Without racecheck the same launch runs (and, in order, even gives the sequential answer).
  ScopedEnv none("KILN_VGPU_CHECK", "none");
  BOOST_CHECK_NO_THROW(gpu.run(ptx, "prefix", Dim3{4}, Dim3{64}, 0, x));
}

BOOST_AUTO_TEST_CASE(every_block_writing_one_word_is_a_waw_hazard_but_atomics_are_not) {
  const char* src = R"(
extern "C" __global__ void last(int* out) {
  if (threadIdx.x == 0) out[0] = blockIdx.x;
}
extern "C" __global__ void count(int* out, const int* bins) {
  atomicAdd(&out[bins[blockIdx.x * blockDim.x + threadIdx.x]], 1);
}
)";
  Gpu gpu;
  std::string ptx = compile(src);
  DevicePtr out = gpu.zeros<int>(4);
  std::vector<int> bins(3 * 32);
  for (std::size_t i = 0; i < bins.size(); ++i) bins[i] = static_cast<int>(i % 4);
  DevicePtr b = gpu.upload(bins);
  ScopedEnv checks("KILN_VGPU_CHECK", "race,init");
  std::string msg = error_text([&] { gpu.run(ptx, "last", Dim3{3}, Dim3{32}, 0, out); });
  BOOST_TEST(mentions(msg, "racecheck: WAW hazard on global memory"), msg);
  BOOST_TEST(mentions(msg, "block (1,0,0) thread (0,0,0)"), msg);
  BOOST_TEST(mentions(msg, "what block (0,0,0) thread (0,0,0) wrote"), msg);
  gpu.run(ptx, "count", Dim3{3}, Dim3{32}, 0, out, b);  // scatter-add across blocks: no hazard
  auto counts = gpu.download<int>(out, 4);
  BOOST_TEST(counts[1] == 24);
  BOOST_TEST(counts[3] == 24);
}

BOOST_AUTO_TEST_CASE(blocks_writing_disjoint_bytes_of_one_word_do_not_race) {
  // Blocks of 50 threads writing one byte each: blocks 0 and 1 share the word at bytes 48..51,
  // and a grid-stride loop revisits the array, each byte always from the same block.
  const char* src = R"(
extern "C" __global__ void mark(unsigned char* flags, const unsigned char* in, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    flags[i] = in[i] + 1;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    flags[i] += 1;
}
)";
  Gpu gpu;
  std::string ptx = compile(src);
  const int n = 1000;
  DevicePtr in = gpu.zeros<unsigned char>(n);
  ScopedEnv checks("KILN_VGPU_CHECK", "race,init");
  DevicePtr flags = fresh(gpu, n);
  gpu.run(ptx, "mark", Dim3{3}, Dim3{50}, 0, flags, in, n);
  auto got = gpu.download<unsigned char>(flags, n);
  BOOST_TEST(got[49] == 2);
  BOOST_TEST(got[999] == 2);
}

BOOST_AUTO_TEST_CASE(threads_of_one_block_need_a_barrier_between_global_accesses) {
  const char* src = R"(
extern "C" __global__ void rotate(float* x, float* out) {
  x[threadIdx.x] = threadIdx.x;
  SYNC;
  out[threadIdx.x] = x[(threadIdx.x + 32) % 64];
}
)";
  Gpu gpu;
  std::string good = compile(std::string("#define SYNC __syncthreads()\n") + src);
  std::string bad = compile(std::string("#define SYNC\n") + src);
  DevicePtr x = gpu.zeros<float>(64), out = gpu.zeros<float>(64);
  ScopedEnv race("KILN_VGPU_CHECK", "race");
  gpu.run(good, "rotate", Dim3{1}, Dim3{64}, 0, x, out);
  BOOST_TEST(gpu.download<float>(out, 64)[0] == 32.0f);
  std::string msg = error_text([&] { gpu.run(bad, "rotate", Dim3{1}, Dim3{64}, 0, x, out); });
  BOOST_TEST((mentions(msg, "RAW hazard on global memory") ||
              mentions(msg, "WAR hazard on global memory")),
             msg);
  BOOST_TEST(mentions(msg, "with no barrier between them"), msg);
}

BOOST_AUTO_TEST_CASE(a_fence_then_an_atomic_ticket_passes_partials_to_the_last_block) {
  // The classic single-pass reduction: each block publishes a partial, fences, takes a ticket;
  // the block that takes the last ticket sums the partials. Without the fence, a race.
  const char* src = R"(
extern "C" __global__ void sum(const int* in, int* partial, unsigned* ticket, int* out) {
  __shared__ bool last;
  int v = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = v;
    FENCE;
    last = atomicAdd(ticket, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (last && threadIdx.x == 0) {
    int s = 0;
    for (int b = 0; b < gridDim.x; ++b) s += partial[b];
    *out = s;
  }
}
)";
  Gpu gpu;
  std::string good = compile(std::string("#define FENCE __threadfence()\n") + src);
  std::string bad = compile(std::string("#define FENCE\n") + src);
  std::vector<int> data(8 * 32);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<int>(i);
  DevicePtr in = gpu.upload(data);
  ScopedEnv checks("KILN_VGPU_CHECK", "race,init");
  DevicePtr partial = fresh(gpu, 8 * sizeof(int)), out = fresh(gpu, sizeof(int));
  DevicePtr ticket = gpu.zeros<unsigned>(1);
  gpu.run(good, "sum", Dim3{8}, Dim3{32}, 0, in, partial, ticket, out);
  BOOST_TEST(gpu.download<int>(out, 1)[0] == 255 * 256 / 2);
  gpu.b->memset8(ticket, 0, sizeof(unsigned));
  std::string msg =
      error_text([&] { gpu.run(bad, "sum", Dim3{8}, Dim3{32}, 0, in, partial, ticket, out); });
  BOOST_TEST(mentions(msg, "racecheck: RAW hazard on global memory"), msg);
  BOOST_TEST(mentions(msg, "block (7,0,0) thread (0,0,0)"), msg);
}

BOOST_AUTO_TEST_CASE(initcheck_reports_a_kernel_read_of_fresh_memory) {
  const char* src = R"(
extern "C" __global__ void copy(const float* in, float* out) {
  out[threadIdx.x] = in[threadIdx.x];
}
)";
  Gpu gpu;
  std::string ptx = compile(src);
  ScopedEnv init("KILN_VGPU_CHECK", "init");
  DevicePtr in = fresh(gpu, 64 * sizeof(float)), out = fresh(gpu, 64 * sizeof(float));
  std::string msg = error_text([&] { gpu.run(ptx, "copy", Dim3{1}, Dim3{64}, 0, in, out); });
  BOOST_TEST(mentions(msg, "initcheck: read of uninitialized global memory"), msg);
  BOOST_TEST(mentions(msg, "(offset 0 in allocation"), msg);
  BOOST_TEST(mentions(msg, "kernel 'copy' block (0,0,0) thread (0,0,0)"), msg);
  BOOST_TEST(mentions(msg, "ld.global"), msg);
  // Copying uninitialized bytes to the host is legal (an empty tensor copied out).
  BOOST_CHECK_NO_THROW(gpu.download<float>(out, 64));
  // Half the input copied in: the first read past it is reported with its offset.
  std::vector<float> half(32, 1.0f);
  gpu.b->copy_to_device(in, half.data(), 32 * sizeof(float));
  msg = error_text([&] { gpu.run(ptx, "copy", Dim3{1}, Dim3{64}, 0, in, out); });
  BOOST_TEST(mentions(msg, "(offset 128 in allocation"), msg);
  BOOST_TEST(mentions(msg, "thread (32,0,0)"), msg);
  // A memset, a device-to-device copy and a kernel's stores all initialize.
  gpu.b->memset8(in, 0, 64 * sizeof(float));
  BOOST_CHECK_NO_THROW(gpu.run(ptx, "copy", Dim3{1}, Dim3{64}, 0, in, out));
  DevicePtr in2 = fresh(gpu, 64 * sizeof(float)), out2 = fresh(gpu, 64 * sizeof(float));
  gpu.b->copy_device(in2, in, 64 * sizeof(float));
  BOOST_CHECK_NO_THROW(gpu.run(ptx, "copy", Dim3{1}, Dim3{64}, 0, in2, out2));
  DevicePtr out3 = fresh(gpu, 64 * sizeof(float));
  BOOST_CHECK_NO_THROW(gpu.run(ptx, "copy", Dim3{1}, Dim3{64}, 0, out2, out3));
}

BOOST_AUTO_TEST_CASE(an_atomic_on_fresh_memory_is_an_uninitialized_read) {
  const char* src = R"(
extern "C" __global__ void bump(int* c) { atomicAdd(c, 1); }
)";
  Gpu gpu;
  std::string ptx = compile(src);
  ScopedEnv init("KILN_VGPU_CHECK", "init");
  DevicePtr c = fresh(gpu, sizeof(int));
  std::string msg = error_text([&] { gpu.run(ptx, "bump", Dim3{2}, Dim3{32}, 0, c); });
  BOOST_TEST(mentions(msg, "initcheck: atomic of uninitialized global memory"), msg);
  gpu.b->memset8(c, 0, sizeof(int));
  gpu.run(ptx, "bump", Dim3{2}, Dim3{32}, 0, c);
  BOOST_TEST(gpu.download<int>(c, 1)[0] == 64);
}

BOOST_AUTO_TEST_CASE(memory_allocated_without_initcheck_counts_as_initialized) {
  const char* src = R"(
extern "C" __global__ void copy(const float* in, float* out) {
  out[threadIdx.x] = in[threadIdx.x];
}
)";
  Gpu gpu;
  std::string ptx = compile(src);
  DevicePtr in, out;
  {
    ScopedEnv none("KILN_VGPU_CHECK", "none");
    in = fresh(gpu, 64 * sizeof(float));
  }
  ScopedEnv init("KILN_VGPU_CHECK", "init");
  out = fresh(gpu, 64 * sizeof(float));
  BOOST_CHECK_NO_THROW(gpu.run(ptx, "copy", Dim3{1}, Dim3{64}, 0, in, out));
  // A launch without initcheck untracks everything: its stores were not recorded.
  DevicePtr in2 = fresh(gpu, 64 * sizeof(float));
  {
    ScopedEnv none("KILN_VGPU_CHECK", "none");
    gpu.run(ptx, "copy", Dim3{1}, Dim3{64}, 0, out, in2);
  }
  BOOST_CHECK_NO_THROW(gpu.run(ptx, "copy", Dim3{1}, Dim3{64}, 0, in2, out));
}

BOOST_AUTO_TEST_CASE(initcheck_reports_a_read_of_an_unwritten_local_array_element) {
  const char* src = R"(
extern "C" __global__ void pick(int* out, int n, int k) {
  int a[16];
  for (int i = 0; i < n; ++i) a[i] = i * 3;
  out[threadIdx.x] = a[(k + threadIdx.x) & 15];
}
)";
  Gpu gpu;
  std::string ptx = compile(src);
  DevicePtr out = gpu.zeros<int>(32);
  ScopedEnv init("KILN_VGPU_CHECK", "init");
  gpu.run(ptx, "pick", Dim3{1}, Dim3{32}, 0, out, 16, 2);
  BOOST_TEST(gpu.download<int>(out, 32)[0] == 6);
  std::string msg = error_text([&] { gpu.run(ptx, "pick", Dim3{1}, Dim3{32}, 0, out, 4, 2); });
  BOOST_TEST(mentions(msg, "initcheck: read of uninitialized local memory at offset 16"), msg);
  BOOST_TEST(mentions(msg, "thread (2,0,0)"), msg);
  BOOST_TEST(mentions(msg, "ld.local"), msg);
}

BOOST_AUTO_TEST_SUITE_END()
