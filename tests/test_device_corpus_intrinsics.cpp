// Device corpus, intrinsics and codegen-shape family: vector loads, struct parameters, 3-D grids,
// thread-local arrays, half2, rounding-mode intrinsics, bit intrinsics, warp redux/match with
// partial masks, CAS-built atomics, atomicInc/Dec, and f32 trig with huge arguments.
#include <algorithm>
#include <cfenv>

#include "test_device_corpus.h"

namespace corpus {
namespace {

struct Strides4 {  // mirrors the kernel's by-value struct parameter
  int ndim;
  long long sizes[4];
  long long strides[4];
};

// f32 arithmetic under a given rounding mode; volatile keeps the compiler from folding it.
template <class Fn>
float with_rounding(int mode, Fn fn) {
  int old = std::fegetround();
  std::fesetround(mode);
  volatile float r = fn();
  std::fesetround(old);
  return r;
}

std::vector<KernelCase> cases() {
  std::vector<KernelCase> v;

  v.push_back({"vector_loads", R"(
extern "C" __global__ void vector_loads(const float4* __restrict__ x, const double2* __restrict__ d,
                                        int4* out, float* sums, int n4) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  float4 a = __ldg(&x[i]);
  double2 b = d[i];
  out[i] = make_int4((int)a.x, (int)a.y, (int)a.z, (int)a.w);
  sums[i] = (a.x + a.y) + (a.z + a.w) + (float)(b.x - b.y);
})",
               [](Runner& r) {
                 const int n4 = 300;
                 auto x = uniform<float>(4 * n4, -1000, 1000, 50);
                 auto d = uniform<double>(2 * n4, -10, 10, 51);
                 auto dx = r.input(x);
                 auto dd = r.input(d);
                 auto out = r.output<int>(4 * n4);
                 auto sums = r.output<float>(n4);
                 r.launch({(n4 + 63) / 64}, {64}, dx, dd, out, sums, n4);
                 std::vector<int> wi(4 * n4);
                 std::vector<float> ws(n4);
                 for (int i = 0; i < 4 * n4; ++i) wi[i] = static_cast<int>(x[i]);
                 for (int i = 0; i < n4; ++i)
                   ws[i] = (x[4 * i] + x[4 * i + 1]) + (x[4 * i + 2] + x[4 * i + 3]) +
                           static_cast<float>(d[2 * i] - d[2 * i + 1]);
                 r.expect_eq(r.read(out), wi, "int4 stores");
                 r.expect_ulp(r.read(sums), ws, 0, "float4 + double2 sums");
               }});

  v.push_back({"struct_param_gather", R"(
struct Strides4 { int ndim; long long sizes[4]; long long strides[4]; };
// A by-value struct parameter, as generated kernels take shapes and strides.
extern "C" __global__ void struct_param_gather(const float* in, float* out, Strides4 s, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  long long rem = i, offset = 0;
  for (int d = s.ndim - 1; d >= 0; --d) {
    offset += (rem % s.sizes[d]) * s.strides[d];
    rem /= s.sizes[d];
  }
  out[i] = in[offset];
})",
               [](Runner& r) {
                 Strides4 s{4, {3, 4, 5, 6}, {1, 90, 3, 15}};  // a permuted contiguous layout
                 const long long n = 3 * 4 * 5 * 6;
                 auto in = uniform<float>(n, -1, 1, 52);
                 auto din = r.input(in);
                 auto out = r.output<float>(n);
                 r.launch({(n + 127) / 128}, {128}, din, out, s, n);
                 std::vector<float> want(n);
                 for (long long i = 0; i < n; ++i) {
                   long long rem = i, off = 0;
                   for (int d = 3; d >= 0; --d)
                     off += (rem % s.sizes[d]) * s.strides[d], rem /= s.sizes[d];
                   want[i] = in[off];
                 }
                 r.expect_eq(r.read(out), want, "gathered");
               }});

  v.push_back({"grid_3d", R"(
extern "C" __global__ void grid_3d(int* out) {
  int bx = blockIdx.x, by = blockIdx.y, bz = blockIdx.z;
  int block = (bz * gridDim.y + by) * gridDim.x + bx;
  int thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  int nthreads = blockDim.x * blockDim.y * blockDim.z;
  out[block * nthreads + thread] = bx + 10 * by + 100 * bz + 1000 * threadIdx.x + 10000 * threadIdx.y + 100000 * threadIdx.z;
})",
               [](Runner& r) {
                 const Dim3 g{3, 2, 2}, b{4, 3, 2};
                 const int n = 3 * 2 * 2 * 4 * 3 * 2;
                 auto out = r.output<int>(n, -1);
                 r.launch(g, b, out);
                 std::vector<int> want(n);
                 for (unsigned bz = 0; bz < g.z; ++bz)
                   for (unsigned by = 0; by < g.y; ++by)
                     for (unsigned bx = 0; bx < g.x; ++bx)
                       for (unsigned tz = 0; tz < b.z; ++tz)
                         for (unsigned ty = 0; ty < b.y; ++ty)
                           for (unsigned tx = 0; tx < b.x; ++tx) {
                             int block = (bz * g.y + by) * g.x + bx,
                                 thread = (tz * b.y + ty) * b.x + tx;
                             want[block * 24 + thread] =
                                 bx + 10 * by + 100 * bz + 1000 * tx + 10000 * ty + 100000 * tz;
                           }
                 r.expect_eq(r.read(out), want, "ids");
               }});

  v.push_back({"local_array_sort", R"(
// A per-thread array indexed by data: it lives in local memory (ld.local/st.local).
extern "C" __global__ void local_array_sort(const int* x, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int a[16];
  for (int k = 0; k < 16; ++k) a[k] = x[16 * i + k];
  for (int k = 1; k < 16; ++k) {
    int key = a[k], j = k - 1;
    while (j >= 0 && a[j] > key) { a[j + 1] = a[j]; --j; }
    a[j + 1] = key;
  }
  for (int k = 0; k < 16; ++k) out[16 * i + k] = a[k];
})",
               [](Runner& r) {
                 const int n = 100;
                 auto x = uniform<int>(16 * n, -1000, 1000, 53);
                 auto dx = r.input(x);
                 auto out = r.output<int>(16 * n);
                 r.launch({1}, {128}, dx, out, n);
                 auto want = x;
                 for (int i = 0; i < n; ++i)
                   std::sort(want.begin() + 16 * i, want.begin() + 16 * i + 16);
                 r.expect_eq(r.read(out), want, "sorted rows");
               }});

  v.push_back({"half2_ops", R"(
#include <cuda_fp16.h>
extern "C" __global__ void half2_ops(const __half2* a, const __half2* b, __half2* sum,
                                     __half2* prod, float* lows, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  sum[i] = __hadd2(a[i], b[i]);
  prod[i] = __hmul2(a[i], __hneg2(b[i]));
  __half2 packed = __floats2half2_rn(__low2float(a[i]) * 0.5f, __high2float(b[i]));
  lows[2 * i] = __low2float(packed);
  lows[2 * i + 1] = __high2float(packed);
})",
               [](Runner& r) {
                 const int n = 500;
                 auto af = uniform<float>(2 * n, -100, 100, 54),
                      bf = uniform<float>(2 * n, -100, 100, 55);
                 std::vector<std::uint16_t> a(2 * n), b(2 * n);
                 for (int i = 0; i < 2 * n; ++i)
                   a[i] = float_to_half(af[i]), b[i] = float_to_half(bf[i]);
                 auto da = r.input(a), db = r.input(b);
                 auto sum = r.output<std::uint16_t>(2 * n), prod = r.output<std::uint16_t>(2 * n);
                 auto lows = r.output<float>(2 * n);
                 r.launch({(n + 127) / 128}, {128}, da, db, sum, prod, lows, n);
                 std::vector<std::uint16_t> ws(2 * n), wp(2 * n);
                 std::vector<float> wl(2 * n);
                 for (int i = 0; i < 2 * n; ++i) {
                   ws[i] = float_to_half(half_to_float(a[i]) + half_to_float(b[i]));
                   wp[i] = float_to_half(-(half_to_float(a[i]) * half_to_float(b[i])));
                 }
                 for (int i = 0; i < n; ++i) {
                   wl[2 * i] = half_to_float(float_to_half(half_to_float(a[2 * i]) * 0.5f));
                   wl[2 * i + 1] = half_to_float(b[2 * i + 1]);
                 }
                 r.expect_eq(r.read(sum), ws, "__hadd2 bits");
                 r.expect_eq(r.read(prod), wp, "__hmul2(a, -b) bits");
                 r.expect_eq(r.read(lows), wl, "__floats2half2_rn / __low2float / __high2float");
               }});

  v.push_back(
      {"rounding_modes", R"(
extern "C" __global__ void rounding_modes(const float* x, const float* y, const double* d,
                                          float* f, int* k, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float a = x[i], b = y[i];
  f[8 * i + 0] = __fadd_rd(a, b);
  f[8 * i + 1] = __fadd_ru(a, b);
  f[8 * i + 2] = __fmul_rz(a, b);
  f[8 * i + 3] = __fdiv_rn(a, b);
  f[8 * i + 4] = __fdiv_ru(a, b);
  f[8 * i + 5] = __fsqrt_rd(fabsf(a));
  f[8 * i + 6] = __fmaf_rz(a, b, 1.0f);
  f[8 * i + 7] = __double2float_rz(d[i]);
  k[4 * i + 0] = __float2int_rd(a);
  k[4 * i + 1] = __float2int_ru(a);
  k[4 * i + 2] = __float2int_rz(a);
  k[4 * i + 3] = __float2int_rn(a);
})",
       [](Runner& r) {
         const int n = 512;
         auto x = uniform<float>(n, -1e4, 1e4, 56), y = uniform<float>(n, 0.1, 100, 57);
         for (int i = 0; i < n; i += 3) y[i] = -y[i];
         x[0] = 2.5f, x[1] = -2.5f, x[2] = 0.5f;
         auto d = uniform<double>(n, -1e6, 1e6, 58);
         auto dx = r.input(x), dy = r.input(y);
         auto dd = r.input(d);
         auto f = r.output<float>(8 * n);
         auto k = r.output<int>(4 * n);
         r.launch({(n + 127) / 128}, {128}, dx, dy, dd, f, k, n);
         std::vector<float> wf(8 * n);
         std::vector<int> wk(4 * n);
         for (int i = 0; i < n; ++i) {
           volatile float a = x[i], b = y[i];
           volatile double di = d[i];
           wf[8 * i + 0] = with_rounding(FE_DOWNWARD, [&] { return a + b; });
           wf[8 * i + 1] = with_rounding(FE_UPWARD, [&] { return a + b; });
           wf[8 * i + 2] = with_rounding(FE_TOWARDZERO, [&] { return a * b; });
           wf[8 * i + 3] = with_rounding(FE_TONEAREST, [&] { return a / b; });
           wf[8 * i + 4] = with_rounding(FE_UPWARD, [&] { return a / b; });
           wf[8 * i + 5] = with_rounding(FE_DOWNWARD, [&] { return std::sqrt(std::fabs(a)); });
           wf[8 * i + 6] = with_rounding(FE_TOWARDZERO, [&] { return std::fma(a, b, 1.0f); });
           wf[8 * i + 7] = with_rounding(FE_TOWARDZERO, [&] { return static_cast<float>(di); });
           wk[4 * i + 0] = static_cast<int>(std::floor(x[i]));
           wk[4 * i + 1] = static_cast<int>(std::ceil(x[i]));
           wk[4 * i + 2] = static_cast<int>(std::trunc(x[i]));
           wk[4 * i + 3] = static_cast<int>(std::nearbyint(x[i]));
         }
         r.expect_eq(r.read(f), wf,
                     "add.rm, add.rp, mul.rz, div.rn, div.rp, sqrt.rm, fma.rz, cvt.rz");
         r.expect_eq(r.read(k), wk, "cvt.rmi, cvt.rpi, cvt.rzi, cvt.rni");
       }});

  v.push_back(
      {"bit_intrinsics", R"(
extern "C" __global__ void bit_intrinsics(const unsigned* x, const unsigned* y, unsigned* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned a = x[i], b = y[i];
  unsigned* o = out + 10 * i;
  o[0] = __brev(a);
  o[1] = __ffs((int)(a & 0xfff000u));
  o[2] = __byte_perm(a, b, 0x7531);
  o[3] = __funnelshift_l(a, b, b & 63);
  o[4] = __funnelshift_rc(a, b, b & 63);
  o[5] = (unsigned)__mulhi((int)a, (int)b);
  o[6] = (unsigned)(__umul64hi(((unsigned long long)a << 32) | b, 0x9E3779B97F4A7C15ull) >> 7);
  o[7] = (unsigned)__hadd((int)a, (int)b);
  o[8] = (unsigned)__rhadd((int)a, (int)b);
  o[9] = __sad((int)a, (int)b, 7u) + __clzll((long long)a) + __ffsll(0ll);
})",
       [](Runner& r) {
         const int n = 700;
         auto x = uniform<unsigned>(n, 0, 0xffffffffu, 59),
              y = uniform<unsigned>(n, 0, 0xffffffffu, 60);
         x[0] = 0, y[0] = 0, x[1] = 0xffffffffu;
         auto dx = r.input(x), dy = r.input(y);
         auto out = r.output<unsigned>(10 * n);
         r.launch({(n + 127) / 128}, {128}, dx, dy, out, n);
         std::vector<unsigned> want(10 * n);
         for (int i = 0; i < n; ++i) {
           unsigned a = x[i], b = y[i];
           unsigned* w = &want[10 * i];
           unsigned rev = 0;
           for (int bit = 0; bit < 32; ++bit) rev |= ((a >> bit) & 1u) << (31 - bit);
           w[0] = rev;
           unsigned m = a & 0xfff000u;
           w[1] = m ? std::countr_zero(m) + 1 : 0;
           unsigned long long bytes = (static_cast<unsigned long long>(b) << 32) | a;
           unsigned perm = 0;
           for (int k = 0; k < 4; ++k)
             perm |= static_cast<unsigned>((bytes >> (8 * ((0x7531 >> (4 * k)) & 7))) & 0xff)
                     << (8 * k);
           w[2] = perm;
           unsigned long long hl = (static_cast<unsigned long long>(b) << 32) | a;
           w[3] = static_cast<unsigned>((hl << ((b & 63) & 31)) >> 32);
           w[4] = static_cast<unsigned>(hl >> std::min(b & 63, 32u));
           w[5] = static_cast<unsigned>(
               (static_cast<long long>(static_cast<int>(a)) * static_cast<int>(b)) >> 32);
           unsigned __int128 p =
               static_cast<unsigned __int128>((static_cast<unsigned long long>(a) << 32) | b) *
               0x9E3779B97F4A7C15ull;
           w[6] = static_cast<unsigned>(static_cast<unsigned long long>(p >> 64) >> 7);
           long long s = static_cast<long long>(static_cast<int>(a)) + static_cast<int>(b);
           w[7] = static_cast<unsigned>(static_cast<int>(s >> 1));
           w[8] = static_cast<unsigned>(static_cast<int>((s + 1) >> 1));
           long long diff = static_cast<long long>(static_cast<int>(a)) - static_cast<int>(b);
           w[9] = static_cast<unsigned>(diff < 0 ? -diff : diff) + 7u +
                  std::countl_zero(static_cast<unsigned long long>(a));
         }
         r.expect_eq(
             r.read(out), want,
             "brev, ffs, byte_perm, funnelshift_l/rc, mulhi, umul64hi, hadd, rhadd, sad+clzll");
       }});

  return v;
}

Register reg("corpus_intrinsics", cases);

}  // namespace
}  // namespace corpus
