// Device corpus, elementwise family: every dtype, conversions, strided and 64-bit indexing,
// grid-stride loops, predication, divergence, __launch_bounds__ and a __noinline__ call.
#include "test_device_corpus.h"

namespace corpus {
namespace {

constexpr int kN = 1000;  // not a multiple of the block size: exercises the bounds check
Dim3 blocks(int n, int threads = 128) {
  return {static_cast<unsigned>((n + threads - 1) / threads)};
}

std::vector<KernelCase> cases() {
  std::vector<KernelCase> v;

  v.push_back({"axpy_f32", R"(
extern "C" __global__ void axpy_f32(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
})",
               [](Runner& r) {
                 auto x = uniform<float>(kN, -10, 10, 1), y = uniform<float>(kN, -10, 10, 2);
                 auto dx = r.input(x);
                 auto dy = r.input(y);
                 r.launch(blocks(kN), {128}, 2.5f, dx, dy, kN);
                 // a*x+y may contract to one fma: allow the difference of one extra rounding.
                 std::vector<float> want(kN);
                 for (int i = 0; i < kN; ++i) want[i] = std::fma(2.5f, x[i], y[i]);
                 r.expect_close(r.read(dy), want, 1e-5, 1e-6, "y");
               }});

  v.push_back({"fma_div_f64", R"(
extern "C" __global__ void fma_div_f64(const double* a, const double* b, double* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = fma(a[i], b[i], 1.0) / (b[i] * b[i] + 1.0);
})",
               [](Runner& r) {
                 auto a = uniform<double>(kN, -100, 100, 3), b = uniform<double>(kN, -3, 3, 4);
                 auto da = r.input(a), db = r.input(b);
                 auto out = r.output<double>(kN);
                 r.launch(blocks(kN), {128}, da, db, out, kN);
                 std::vector<double> want(kN);
                 for (int i = 0; i < kN; ++i)
                   want[i] = std::fma(a[i], b[i], 1.0) / std::fma(b[i], b[i], 1.0);
                 r.expect_ulp(r.read(out), want, 2, "out");  // f64 is exact IEEE even in fast math
               }});

  v.push_back({"int_ops_i32", R"(
extern "C" __global__ void int_ops_i32(const int* a, const int* b, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int x = a[i], y = b[i];
  out[5 * i + 0] = x / y;
  out[5 * i + 1] = x % y;
  out[5 * i + 2] = (x << 3) ^ (x >> 2);
  out[5 * i + 3] = (int)((unsigned)x >> 5) + min(x, y) - max(x, y);
  out[5 * i + 4] = x * y + __popc(x) + __clz(y) + abs(x);
})",
               [](Runner& r) {
                 auto a = uniform<int>(kN, -100000, 100000, 5), b = uniform<int>(kN, 1, 1000, 6);
                 for (int i = 0; i < kN; i += 2) b[i] = -b[i];
                 auto da = r.input(a), db = r.input(b);
                 auto out = r.output<int>(5 * kN);
                 r.launch(blocks(kN), {128}, da, db, out, kN);
                 std::vector<int> want(5 * kN);
                 for (int i = 0; i < kN; ++i) {
                   int x = a[i], y = b[i];
                   want[5 * i + 0] = x / y;
                   want[5 * i + 1] = x % y;
                   want[5 * i + 2] = static_cast<int>(static_cast<unsigned>(x) << 3) ^ (x >> 2);
                   want[5 * i + 3] = static_cast<int>(static_cast<unsigned>(x) >> 5) +
                                     std::min(x, y) - std::max(x, y);
                   want[5 * i + 4] = x * y + std::popcount(static_cast<unsigned>(x)) +
                                     std::countl_zero(static_cast<unsigned>(y)) + std::abs(x);
                 }
                 r.expect_eq(r.read(out), want, "out");
               }});

  v.push_back({"int_ops_i64", R"(
extern "C" __global__ void int_ops_i64(const long long* a, const long long* b, long long* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  long long x = a[i], y = b[i];
  out[4 * i + 0] = x / y;
  out[4 * i + 1] = x % y;
  out[4 * i + 2] = x * y + (x >> 7);
  out[4 * i + 3] = (long long)((unsigned long long)x * 0x9E3779B97F4A7C15ull >> 3) + __popcll(x);
})",
               [](Runner& r) {
                 auto a = uniform<long long>(kN, -(1LL << 50), 1LL << 50, 7);
                 auto b = uniform<long long>(kN, 1, 1LL << 20, 8);
                 for (int i = 1; i < kN; i += 2) b[i] = -b[i];
                 auto da = r.input(a), db = r.input(b);
                 auto out = r.output<long long>(4 * kN);
                 r.launch(blocks(kN), {128}, da, db, out, kN);
                 std::vector<long long> want(4 * kN);
                 for (int i = 0; i < kN; ++i) {
                   long long x = a[i], y = b[i];
                   want[4 * i + 0] = x / y;
                   want[4 * i + 1] = x % y;
                   want[4 * i + 2] = static_cast<long long>(static_cast<unsigned long long>(x) *
                                                            static_cast<unsigned long long>(y)) +
                                     (x >> 7);
                   want[4 * i + 3] =
                       static_cast<long long>(
                           static_cast<unsigned long long>(x) * 0x9E3779B97F4A7C15ull >> 3) +
                       std::popcount(static_cast<unsigned long long>(x));
                 }
                 r.expect_eq(r.read(out), want, "out");
               }});

  v.push_back({"mask_select_u8", R"(
extern "C" __global__ void mask_select_u8(const bool* mask, const unsigned char* a,
                                          const unsigned char* b, unsigned char* out,
                                          bool* gt, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned char s = (unsigned char)(a[i] + b[i]);  // wraps modulo 256
  out[i] = mask[i] ? s : (unsigned char)(a[i] ^ b[i]);
  gt[i] = a[i] > b[i] && !mask[i];
})",
               [](Runner& r) {
                 auto m8 = uniform<std::uint8_t>(kN, 0, 1, 9);
                 auto a = uniform<std::uint8_t>(kN, 0, 255, 10),
                      b = uniform<std::uint8_t>(kN, 0, 255, 11);
                 auto dm = r.input(m8), da = r.input(a), db = r.input(b);
                 auto out = r.output<std::uint8_t>(kN), gt = r.output<std::uint8_t>(kN, 7);
                 r.launch(blocks(kN), {128}, dm, da, db, out, gt, kN);
                 std::vector<std::uint8_t> want(kN), want_gt(kN);
                 for (int i = 0; i < kN; ++i) {
                   want[i] = m8[i] ? static_cast<std::uint8_t>(a[i] + b[i]) : a[i] ^ b[i];
                   want_gt[i] = a[i] > b[i] && !m8[i];
                 }
                 r.expect_eq(r.read(out), want, "out");
                 r.expect_eq(r.read(gt), want_gt, "gt (bool stored as 0/1)");
               }});

  v.push_back({"add_f16", R"(
#include <cuda_fp16.h>
extern "C" __global__ void add_f16(const __half* a, const __half* b, __half* sum, __half* prod, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  sum[i] = __hadd(a[i], b[i]);
  prod[i] = a[i] * b[i];
})",
               [](Runner& r) {
                 auto af = uniform<float>(kN, -60, 60, 12), bf = uniform<float>(kN, -60, 60, 13);
                 std::vector<std::uint16_t> a(kN), b(kN);
                 for (int i = 0; i < kN; ++i)
                   a[i] = float_to_half(af[i]), b[i] = float_to_half(bf[i]);
                 auto da = r.input(a), db = r.input(b);
                 auto sum = r.output<std::uint16_t>(kN), prod = r.output<std::uint16_t>(kN);
                 r.launch(blocks(kN), {128}, da, db, sum, prod, kN);
                 // f16 add/mul are correctly rounded: the f32 result (exact here) rounded to f16.
                 std::vector<std::uint16_t> ws(kN), wp(kN);
                 for (int i = 0; i < kN; ++i) {
                   ws[i] = float_to_half(half_to_float(a[i]) + half_to_float(b[i]));
                   wp[i] = float_to_half(half_to_float(a[i]) * half_to_float(b[i]));
                 }
                 r.expect_eq(r.read(sum), ws, "sum bits");
                 r.expect_eq(r.read(prod), wp, "product bits");
               }});

  v.push_back({"mul_bf16", R"(
#include <cuda_bf16.h>
extern "C" __global__ void mul_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b,
                                    __nv_bfloat16* out, float* wide, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = __hmul(a[i], b[i]);
  wide[i] = __bfloat162float(a[i]) - __bfloat162float(b[i]);
})",
               [](Runner& r) {
                 auto af = uniform<float>(kN, -1e3, 1e3, 14),
                      bf = uniform<float>(kN, -1e3, 1e3, 15);
                 std::vector<std::uint16_t> a(kN), b(kN);
                 for (int i = 0; i < kN; ++i)
                   a[i] = float_to_bf16(af[i]), b[i] = float_to_bf16(bf[i]);
                 auto da = r.input(a), db = r.input(b);
                 auto out = r.output<std::uint16_t>(kN);
                 auto wide = r.output<float>(kN);
                 r.launch(blocks(kN), {128}, da, db, out, wide, kN);
                 std::vector<std::uint16_t> want(kN);
                 std::vector<float> want_wide(kN);
                 for (int i = 0; i < kN; ++i) {
                   // bf16 x bf16 is exact in f32 (8+8 bit significands), so one rounding to bf16.
                   want[i] = float_to_bf16(bf16_to_float(a[i]) * bf16_to_float(b[i]));
                   want_wide[i] = bf16_to_float(a[i]) - bf16_to_float(b[i]);
                 }
                 r.expect_eq(r.read(out), want, "product bits");
                 r.expect_ulp(r.read(wide), want_wide, 0, "difference in f32");
               }});

  v.push_back({"convert_f16_bf16", R"(
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void convert_f16_bf16(const float* x, __half* h, __nv_bfloat16* b,
                                            float* back, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __half hv = __float2half_rn(x[i]);
  __nv_bfloat16 bv = __float2bfloat16_rn(x[i]);
  h[i] = hv;
  b[i] = bv;
  back[2 * i] = __half2float(hv);
  back[2 * i + 1] = __bfloat162float(bv);
})",
               [](Runner& r) {
                 auto x = uniform<float>(kN, -70000, 70000, 16);
                 auto small = uniform<float>(kN / 2, -2, 2, 17);  // includes f16 subnormals
                 for (int i = 0; i < kN / 2; ++i) x[2 * i] = small[i] * (i % 3 == 0 ? 1e-5f : 1.f);
                 x[0] = 0.f, x[1] = -0.f, x[3] = 65504.f, x[5] = 65520.f, x[7] = INFINITY;
                 auto dx = r.input(x);
                 auto h = r.output<std::uint16_t>(kN), b = r.output<std::uint16_t>(kN);
                 auto back = r.output<float>(2 * kN);
                 r.launch(blocks(kN), {128}, dx, h, b, back, kN);
                 std::vector<std::uint16_t> wh(kN), wb(kN);
                 std::vector<float> wback(2 * kN);
                 for (int i = 0; i < kN; ++i) {
                   wh[i] = float_to_half(x[i]), wb[i] = float_to_bf16(x[i]);
                   wback[2 * i] = half_to_float(wh[i]), wback[2 * i + 1] = bf16_to_float(wb[i]);
                 }
                 r.expect_eq(r.read(h), wh, "f32 -> f16 bits");
                 r.expect_eq(r.read(b), wb, "f32 -> bf16 bits");
                 // Under fast math the f32 results of f16 subnormals may flush to zero.
                 if (r.fast_math())
                   r.expect_close(r.read(back), wback, 1e-7, 0, "f16/bf16 -> f32");
                 else
                   r.expect_ulp(r.read(back), wback, 0, "f16/bf16 -> f32");
               }});

  v.push_back({"convert_int_float", R"(
extern "C" __global__ void convert_int_float(const float* x, const long long* l, int* i32,
                                             long long* i64, float* f, double* d,
                                             unsigned* u32, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  i32[i] = (int)x[i];            // truncation
  i64[i] = __float2ll_rn(x[i]);  // round to nearest even
  f[i] = (float)l[i];            // rounds
  d[i] = (double)l[i] + (double)x[i];
  u32[i] = (unsigned)fabsf(x[i]);
})",
               [](Runner& r) {
                 auto x = uniform<float>(kN, -1e6, 1e6, 18);
                 x[0] = 2.5f, x[1] = -2.5f, x[2] = 3.5f, x[3] = -0.5f;
                 auto l = uniform<long long>(kN, -(1LL << 60), 1LL << 60, 19);
                 auto dx = r.input(x);
                 auto dl = r.input(l);
                 auto i32 = r.output<int>(kN);
                 auto i64 = r.output<long long>(kN);
                 auto f = r.output<float>(kN);
                 auto d = r.output<double>(kN);
                 auto u32 = r.output<unsigned>(kN);
                 r.launch(blocks(kN), {128}, dx, dl, i32, i64, f, d, u32, kN);
                 std::vector<int> wi(kN);
                 std::vector<long long> wl(kN);
                 std::vector<float> wf(kN);
                 std::vector<double> wd(kN);
                 std::vector<unsigned> wu(kN);
                 for (int i = 0; i < kN; ++i) {
                   wi[i] = static_cast<int>(x[i]);
                   wl[i] = std::llrint(x[i]);  // default rounding mode: nearest even
                   wf[i] = static_cast<float>(l[i]);
                   wd[i] = static_cast<double>(l[i]) + static_cast<double>(x[i]);
                   wu[i] = static_cast<unsigned>(std::fabs(x[i]));
                 }
                 r.expect_eq(r.read(i32), wi, "(int)float");
                 r.expect_eq(r.read(i64), wl, "__float2ll_rn");
                 r.expect_eq(r.read(f), wf, "(float)long long");
                 r.expect_eq(r.read(d), wd, "double sum");
                 r.expect_eq(r.read(u32), wu, "(unsigned)fabsf");
               }});

  v.push_back(
      {"strided_transpose", R"(
extern "C" __global__ void strided_transpose(const float* in, float* out, int rows, int cols,
                                             long long in_row_stride, long long in_col_stride) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  int r = blockIdx.y * blockDim.y + threadIdx.y;
  if (r < rows && c < cols) out[(long long)c * rows + r] = in[r * in_row_stride + c * in_col_stride];
})",
       [](Runner& r) {
         const int rows = 37, cols = 53;
         // A column-major-ish view: element (i, j) at i * 2 + j * (2 * rows + 3).
         const long long rs = 2, cs = 2 * rows + 3;
         auto in = uniform<float>(static_cast<std::size_t>(cs * cols), -1, 1, 20);
         auto din = r.input(in);
         auto out = r.output<float>(rows * cols);
         r.launch({(cols + 15) / 16, (rows + 7) / 8}, {16, 8}, din, out, rows, cols, rs, cs);
         std::vector<float> want(rows * cols);
         for (int i = 0; i < rows; ++i)
           for (int j = 0; j < cols; ++j) want[j * rows + i] = in[i * rs + j * cs];
         r.expect_eq(r.read(out), want, "out");
       }});

  v.push_back({"index64", R"(
// The offset only fits in 64 bits: 32-bit index arithmetic would wrap and read elsewhere.
extern "C" __global__ void index64(const int* base, int* out, long long big, int n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  long long j = (i + big) - big;
  long long scaled = (i * 4294967296LL) >> 32;  // i * 2^32 overflows 32 bits
  out[i] = base[j] + (int)(scaled - i) + (int)((i + big) >> 32);
})",
               [](Runner& r) {
                 auto base = uniform<int>(kN, -1000, 1000, 21);
                 auto db = r.input(base);
                 auto out = r.output<int>(kN);
                 const long long big = 5LL << 32;
                 r.launch(blocks(kN), {128}, db, out, big, kN);
                 std::vector<int> want(kN);
                 for (int i = 0; i < kN; ++i) want[i] = base[i] + 5;
                 r.expect_eq(r.read(out), want, "out");
               }});

  v.push_back({"grid_stride", R"(
extern "C" __global__ void grid_stride(const float* x, float* y, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    y[i] = x[i] * x[i] - 1.0f;
})",
               [](Runner& r) {
                 const int n = 5000;
                 auto x = uniform<float>(n, -3, 3, 22);
                 auto dx = r.input(x);
                 auto y = r.output<float>(n);
                 r.launch({3}, {64}, dx, y, static_cast<unsigned long long>(n));  // 192 threads
                 std::vector<float> want(n);
                 for (int i = 0; i < n; ++i) want[i] = std::fma(x[i], x[i], -1.0f);
                 r.expect_close(r.read(y), want, 1e-6, 1e-6, "y");
               }});

  v.push_back({"predicated_clamp", R"(
extern "C" __global__ void predicated_clamp(const float* x, float* y, int* count, float lo,
                                            float hi, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  float c = v < lo ? lo : v;  // selects, usually compiled to selp / predicated moves
  c = c > hi ? hi : c;
  y[i] = c;
  if (c != v) atomicAdd(count, 1);
})",
               [](Runner& r) {
                 auto x = uniform<float>(kN, -2, 2, 23);
                 auto dx = r.input(x);
                 auto y = r.output<float>(kN);
                 auto count = r.output<int>(1);
                 r.launch(blocks(kN), {128}, dx, y, count, -1.0f, 1.5f, kN);
                 std::vector<float> want(kN);
                 int clamped = 0;
                 for (int i = 0; i < kN; ++i) {
                   want[i] = std::min(std::max(x[i], -1.0f), 1.5f);
                   clamped += want[i] != x[i];
                 }
                 r.expect_eq(r.read(y), want, "y");
                 r.expect_eq(r.read(count), std::vector<int>{clamped}, "count");
               }});

  v.push_back({"divergent_reconverge", R"(
extern "C" __global__ void divergent_reconverge(const int* x, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = i < n ? x[i] : 0;
  // Lanes take different paths (with a data-dependent loop), then meet for a warp shuffle.
  if (v % 3 == 0) {
    v = v * 2;
  } else if (v % 3 == 1) {
    for (int k = 0; k < (v & 7); ++k) v += k;
  } else {
    v = -v;
  }
  __syncwarp();
  int neighbour = __shfl_xor_sync(0xffffffffu, v, 1);
  if (i < n) out[i] = v + neighbour;
})",
               [](Runner& r) {
                 const int n = 256;
                 auto x = uniform<int>(n, 0, 100000, 24);
                 auto dx = r.input(x);
                 auto out = r.output<int>(n);
                 r.launch({2}, {128}, dx, out, n);
                 std::vector<int> v(n), want(n);
                 for (int i = 0; i < n; ++i) {
                   int a = x[i];
                   if (a % 3 == 0)
                     a *= 2;
                   else if (a % 3 == 1)
                     for (int k = 0; k < (a & 7); ++k) a += k;
                   else
                     a = -a;
                   v[i] = a;
                 }
                 for (int i = 0; i < n; ++i) want[i] = v[i] + v[i ^ 1];
                 r.expect_eq(r.read(out), want, "out");
               }});

  v.push_back({"launch_bounds_noinline", R"(
__device__ __noinline__ float poly(float x, int degree) {
  float acc = 0.0f;
  for (int k = degree; k >= 0; --k) acc = acc * x + (float)(k + 1);
  return acc;
}
extern "C" __global__ void __launch_bounds__(256, 2)
launch_bounds_noinline(const float* x, float* y, int degree, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = poly(x[i], degree);
})",
               [](Runner& r) {
                 BOOST_TEST(r.module().ptx.find(".maxntid 256") != std::string::npos,
                            "__launch_bounds__ reaches the PTX as .maxntid");
                 BOOST_TEST(r.module().ptx.find(".func") != std::string::npos,
                            "the __noinline__ function stays a .func");
                 BOOST_TEST(r.module().ptx.find("call") != std::string::npos);
                 auto x = uniform<float>(kN, -1, 1, 25);
                 auto dx = r.input(x);
                 auto y = r.output<float>(kN);
                 r.launch(blocks(kN, 256), {256}, dx, y, 4, kN);
                 std::vector<float> want(kN);
                 for (int i = 0; i < kN; ++i) {
                   double acc = 0;
                   for (int k = 4; k >= 0; --k) acc = acc * x[i] + (k + 1);
                   want[i] = static_cast<float>(acc);
                 }
                 r.expect_close(r.read(y), want, 1e-5, 1e-5, "y");
               }});

  return v;
}

Register reg("corpus_elementwise", cases);

}  // namespace
}  // namespace corpus
