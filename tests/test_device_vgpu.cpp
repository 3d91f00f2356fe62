// The virtual GPU running real NVRTC output: elementwise kernels in every dtype, grid-stride
// loops with 64-bit indexing, shared-memory reductions, warp shuffles and votes, atomics,
// dynamic shared memory, libm math (also with --use_fast_math), device calls. Every result is
// checked against an independent host computation.

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/cuda/backends.h"
#include "runtime/cuda/virtual/virtual_backend.h"
#include "support/float_bits.h"
#include "support/vgpu_harness.h"

using namespace kiln::test;

BOOST_AUTO_TEST_SUITE(vgpu_kernels)

BOOST_AUTO_TEST_CASE(vector_add_f32_partial_block) {
  Gpu g;
  std::string ptx = compile(R"(
extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
})");
  int n = 1000;
  auto a = random_floats(n, 1), b = random_floats(n, 2);
  DevicePtr da = g.upload(a), db = g.upload(b), dc = g.zeros<float>(n);
  g.run(ptx, "add", Dim3{4}, Dim3{256}, 0, da, db, dc, n);
  auto c = g.download<float>(dc, n);
  for (int i = 0; i < n; ++i) BOOST_REQUIRE_EQUAL(c[i], a[i] + b[i]);
  BOOST_TEST(kiln::cuda::vgpu::executed_thread_instructions(*g.b) > 1000u);
}

BOOST_AUTO_TEST_CASE(grid_stride_f64_with_64bit_indexing) {
  Gpu g;
  std::string ptx = compile(R"(
extern "C" __global__ void gs(const double* a, double* c, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    c[i] = sqrt(a[i]) * 2.0 + (double)i;
})");
  long long n = 3001;
  std::vector<double> a(static_cast<std::size_t>(n));
  for (long long i = 0; i < n; ++i) a[static_cast<std::size_t>(i)] = 0.5 * static_cast<double>(i);
  DevicePtr da = g.upload(a), dc = g.zeros<double>(static_cast<std::size_t>(n));
  g.run(ptx, "gs", Dim3{3}, Dim3{128}, 0, da, dc, n);
  auto c = g.download<double>(dc, static_cast<std::size_t>(n));
  for (long long i = 0; i < n; ++i)
    BOOST_REQUIRE_EQUAL(c[static_cast<std::size_t>(i)],
                        std::sqrt(a[static_cast<std::size_t>(i)]) * 2.0 + static_cast<double>(i));
}

BOOST_AUTO_TEST_CASE(elementwise_integer_dtypes) {
  Gpu g;
  std::string ptx = compile(R"(
template <class T> __device__ void body(const T* a, const T* b, T* c, int i) {
  c[4 * i + 0] = a[i] + b[i];
  c[4 * i + 1] = a[i] * b[i];
  c[4 * i + 2] = b[i] != 0 ? a[i] / b[i] : T(0);
  c[4 * i + 3] = b[i] != 0 ? a[i] % b[i] : T(0);
}
#define K(T) extern "C" __global__ void k_##T(const T* a, const T* b, T* c, int n) { \
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) body<T>(a, b, c, i); }
typedef signed char i8; typedef unsigned char u8; typedef short i16; typedef unsigned short u16;
typedef int i32; typedef unsigned u32; typedef long long i64; typedef unsigned long long u64;
K(i8) K(u8) K(i16) K(u16) K(i32) K(u32) K(i64) K(u64)
)");
  auto check = [&](auto zero, const char* name) {
    using T = decltype(zero);
    int n = 70;
    std::vector<T> a(n), b(n);
    std::uint32_t s = 7;
    for (int i = 0; i < n; ++i) {
      s = s * 1664525u + 1013904223u;
      a[i] = static_cast<T>(s >> 7);
      s = s * 1664525u + 1013904223u;
      b[i] = static_cast<T>((s >> 9) % 50) - (std::is_signed_v<T> ? T(20) : T(0));
    }
    DevicePtr da = g.upload(a), db = g.upload(b), dc = g.zeros<T>(4 * n);
    g.run(ptx, name, Dim3{2}, Dim3{64}, 0, da, db, dc, n);
    auto c = g.download<T>(dc, 4 * n);
    for (int i = 0; i < n; ++i) {
      BOOST_REQUIRE_EQUAL(+c[4 * i + 0], +static_cast<T>(a[i] + b[i]));
      BOOST_REQUIRE_EQUAL(+c[4 * i + 1], +static_cast<T>(a[i] * b[i]));
      BOOST_REQUIRE_EQUAL(+c[4 * i + 2], +(b[i] != 0 ? static_cast<T>(a[i] / b[i]) : T(0)));
      BOOST_REQUIRE_EQUAL(+c[4 * i + 3], +(b[i] != 0 ? static_cast<T>(a[i] % b[i]) : T(0)));
    }
  };
  check(std::int8_t{}, "k_i8");
  check(std::uint8_t{}, "k_u8");
  check(std::int16_t{}, "k_i16");
  check(std::uint16_t{}, "k_u16");
  check(std::int32_t{}, "k_i32");
  check(std::uint32_t{}, "k_u32");
  check(std::int64_t{}, "k_i64");
  check(std::uint64_t{}, "k_u64");
}

BOOST_AUTO_TEST_CASE(half_and_bfloat16_elementwise) {
  Gpu g;
  std::string ptx = compile(R"(
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void h(const __half* a, const __half* b, __half* c, __half2* c2, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    c[i] = __hadd(a[i], __hmul(a[i], b[i]));
    c2[i] = __hfma2(__halves2half2(a[i], b[i]), __halves2half2(b[i], a[i]),
                    __halves2half2(a[i], a[i]));
  }
}
extern "C" __global__ void bf(const __nv_bfloat16* a, __nv_bfloat16* c, float* f, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    c[i] = __float2bfloat16(__bfloat162float(a[i]) * 3.0f) + a[i];
    f[i] = __bfloat162float(a[i]);
  }
})");
  // Expected bits from encodings written out in the test (not the interpreter's conversions).
  auto h16 = [](double x) { return kiln::test::f16_bits(x); };
  auto b16 = [](double x) { return kiln::test::bf16_bits(x); };
  auto half_to_float = [](std::uint16_t h) { return kiln::test::f16_value(h); };
  auto bf16_to_float = [](std::uint16_t h) {
    return static_cast<float>(kiln::test::bf16_value(h));
  };
  int n = 100;
  auto fa = random_floats(n, 3), fb = random_floats(n, 4);
  std::vector<std::uint16_t> a(n), b(n), ba(n);
  for (int i = 0; i < n; ++i) a[i] = h16(fa[i]), b[i] = h16(fb[i]), ba[i] = b16(fa[i] * 100);
  DevicePtr da = g.upload(a), db = g.upload(b), dc = g.zeros<std::uint16_t>(n),
            dc2 = g.zeros<std::uint32_t>(n);
  g.run(ptx, "h", Dim3{1}, Dim3{128}, 0, da, db, dc, dc2, n);
  auto c = g.download<std::uint16_t>(dc, n);
  auto c2 = g.download<std::uint32_t>(dc2, n);
  for (int i = 0; i < n; ++i) {
    double x = half_to_float(a[i]), y = half_to_float(b[i]);
    std::uint16_t prod = h16(x * y);
    BOOST_REQUIRE_EQUAL(c[i], h16(x + half_to_float(prod)));
    BOOST_REQUIRE_EQUAL(c2[i] & 0xffff, h16(std::fma(x, y, x)));
    BOOST_REQUIRE_EQUAL(c2[i] >> 16, h16(std::fma(y, x, x)));
  }
  DevicePtr dba = g.upload(ba), dbc = g.zeros<std::uint16_t>(n), df = g.zeros<float>(n);
  g.run(ptx, "bf", Dim3{1}, Dim3{128}, 0, dba, dbc, df, n);
  auto bc = g.download<std::uint16_t>(dbc, n);
  auto f = g.download<float>(df, n);
  for (int i = 0; i < n; ++i) {
    float x = bf16_to_float(ba[i]);
    BOOST_REQUIRE_EQUAL(f[i], x);
    double t3 = bf16_to_float(b16(double(x * 3.0f)));
    BOOST_REQUIRE_EQUAL(bc[i], b16(t3 + x));
  }
}

BOOST_AUTO_TEST_CASE(shared_memory_block_reduction_with_shuffles_and_atomics) {
  Gpu g;
  std::string ptx = compile(R"(
extern "C" __global__ void __launch_bounds__(256) reduce(const float* a, float* out, int n) {
  __shared__ float s[256];
  float v = 0;
  for (int i = blockIdx.x * 256 + threadIdx.x; i < n; i += gridDim.x * 256) v += a[i];
  s[threadIdx.x] = v; __syncthreads();
  for (int k = 128; k >= 32; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x < 32) {
    v = s[threadIdx.x];
    for (int o = 16; o; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
    if (threadIdx.x == 0) atomicAdd(out, v);
  }
})");
  int n = 5000;
  std::vector<float> a(n);
  for (int i = 0; i < n; ++i) a[i] = static_cast<float>(i % 17);  // exact sums
  DevicePtr da = g.upload(a), dout = g.zeros<float>(1);
  g.run(ptx, "reduce", Dim3{3}, Dim3{256}, 0, da, dout, n);
  double want = 0;
  for (float x : a) want += x;
  BOOST_TEST(g.download<float>(dout, 1)[0] == static_cast<float>(want));
}

// Each kernel of a module is charged for its own static shared memory only, as a GPU lays out
// each kernel's alone: two kernels of 32 KiB each launch, one kernel of 64 KiB is refused, and
// dynamic shared memory after a kernel's static array does not overlap it.
BOOST_AUTO_TEST_CASE(static_shared_memory_is_charged_per_kernel) {
  Gpu g;
  std::string ptx = compile(R"(
extern "C" __global__ void first(float* out, float* dyn_out) {
  __shared__ float s[8192];
  extern __shared__ float dyn[];
  s[threadIdx.x] = threadIdx.x; dyn[threadIdx.x] = -1.0f; __syncthreads();
  out[threadIdx.x] = s[31 - threadIdx.x];
  dyn_out[threadIdx.x] = dyn[threadIdx.x];
}
extern "C" __global__ void second(float* out) {
  __shared__ float t[8192];
  t[threadIdx.x] = 2.0f * threadIdx.x; __syncthreads();
  out[threadIdx.x] = t[31 - threadIdx.x];
}
extern "C" __global__ void both(float* out) {
  __shared__ float u[8192], w[8192];
  u[threadIdx.x] = threadIdx.x; w[threadIdx.x] = u[threadIdx.x]; __syncthreads();
  out[threadIdx.x] = u[8191 - threadIdx.x] + w[8191 - threadIdx.x];
})");
  DevicePtr a = g.zeros<float>(32), b = g.zeros<float>(32), d = g.zeros<float>(32);
  g.run(ptx, "first", Dim3{1}, Dim3{32}, 32 * sizeof(float), a, d);
  g.run(ptx, "second", Dim3{1}, Dim3{32}, 0, b);
  std::vector<float> got_a = g.download<float>(a, 32), got_b = g.download<float>(b, 32);
  std::vector<float> got_d = g.download<float>(d, 32);
  for (int i = 0; i < 32; ++i) {
    BOOST_TEST(got_a[i] == static_cast<float>(31 - i));
    BOOST_TEST(got_b[i] == 2.0f * static_cast<float>(31 - i));
    BOOST_TEST(got_d[i] == -1.0f);
  }
  std::string why = error_text([&] { g.run(ptx, "both", Dim3{1}, Dim3{32}, 0, a); });
  BOOST_TEST(why.find("65536 bytes of static shared memory") != std::string::npos, why);
}

BOOST_AUTO_TEST_CASE(dynamic_shared_memory_and_2d_blocks) {
  Gpu g;
  std::string ptx = compile(R"(
extern "C" __global__ void rev(const int* a, int* b) {
  extern __shared__ int sm[];
  int t = threadIdx.y * blockDim.x + threadIdx.x, n = blockDim.x * blockDim.y;
  int base = (blockIdx.y * gridDim.x + blockIdx.x) * n;
  sm[t] = a[base + t];
  __syncthreads();
  b[base + t] = sm[n - 1 - t] * 10 + blockIdx.y;
})");
  Dim3 grid{2, 3}, block{8, 4};
  int total = 2 * 3 * 32;
  std::vector<int> a(total);
  std::iota(a.begin(), a.end(), 0);
  DevicePtr da = g.upload(a), db = g.zeros<int>(total);
  g.run(ptx, "rev", grid, block, 32 * sizeof(int), da, db);
  auto b = g.download<int>(db, total);
  for (int blk = 0; blk < 6; ++blk)
    for (int t = 0; t < 32; ++t)
      BOOST_REQUIRE_EQUAL(b[blk * 32 + t], a[blk * 32 + 31 - t] * 10 + blk / 2);
}

BOOST_AUTO_TEST_CASE(device_function_calls_and_local_arrays) {
  Gpu g;
  std::string ptx = compile(R"(
__device__ __noinline__ float f(float x, int y) { return x * y + 1; }
__device__ __noinline__ long long fact(int n) { return n <= 1 ? 1 : n * fact(n - 1); }
extern "C" __global__ void calls(float* a, long long* b, const int* idx) {
  int t = threadIdx.x;
  a[t] = f(a[t], t);
  int loc[10];
  for (int i = 0; i < 10; i++) loc[i] = i * i + t;
  b[t] = loc[idx[t]] + fact(t % 15);
})");
  int n = 32;
  std::vector<float> a(n);
  std::vector<int> idx(n);
  for (int i = 0; i < n; ++i) a[i] = 0.5f * static_cast<float>(i), idx[i] = (i * 7) % 10;
  DevicePtr da = g.upload(a), db = g.zeros<long long>(n), di = g.upload(idx);
  g.run(ptx, "calls", Dim3{1}, Dim3{32}, 0, da, db, di);
  auto ra = g.download<float>(da, n);
  auto rb = g.download<long long>(db, n);
  for (int i = 0; i < n; ++i) {
    BOOST_REQUIRE_EQUAL(ra[i], a[i] * static_cast<float>(i) + 1);
    long long fact = 1;
    for (int k = 2; k <= i % 15; ++k) fact *= k;
    BOOST_REQUIRE_EQUAL(rb[i], idx[i] * idx[i] + i + fact);
  }
}

BOOST_AUTO_TEST_SUITE_END()
