// Device corpus, cooperative family: shared-memory reductions, dynamic shared memory, every
// shuffle mode with widths, warp reductions and scans, votes, barriers with reductions, and
// atomics on global and shared memory.
#include <algorithm>
#include <numeric>

#include "test_device_corpus.h"

namespace corpus {
namespace {

// What lane `lane` reads in each shuffle mode, by CUDA's rules (own value when out of range).
int shfl_idx_src(int lane, int src, int width) {
  return (lane & ~(width - 1)) + (src % width);
}
int shfl_up_src(int lane, int d, int width) {
  return (lane % width) - d < 0 ? lane : lane - d;
}
int shfl_down_src(int lane, int d, int width) {
  return (lane % width) + d >= width ? lane : lane + d;
}
// xor may read earlier segments but not later ones.
int shfl_xor_src(int lane, int m, int width) {
  int src = lane ^ m;
  return src > ((lane & ~(width - 1)) + width - 1) ? lane : src;
}

std::vector<KernelCase> cases() {
  std::vector<KernelCase> v;

  v.push_back({"block_reduce_sum", R"(
extern "C" __global__ void block_reduce_sum(const float* x, float* partial, int n) {
  __shared__ float s[256];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (t < stride) s[t] += s[t + stride];
    __syncthreads();
  }
  if (t == 0) partial[blockIdx.x] = s[0];
})",
               [](Runner& r) {
                 const int n = 3000, blocks = (n + 255) / 256;
                 auto x = uniform<float>(n, -1, 1, 30);
                 auto dx = r.input(x);
                 auto partial = r.output<float>(blocks);
                 r.launch({blocks}, {256}, dx, partial, n);
                 std::vector<float> want(blocks);
                 for (int b = 0; b < blocks; ++b) {
                   double s = 0;
                   for (int i = b * 256; i < std::min(n, (b + 1) * 256); ++i) s += x[i];
                   want[b] = static_cast<float>(s);
                 }
                 r.expect_close(r.read(partial), want, 1e-5, 1e-5, "block sums");
               }});

  v.push_back({"dynamic_shared_max", R"(
extern "C" __global__ void dynamic_shared_max(const int* x, int* out, int n) {
  extern __shared__ int s[];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : -2147483647 - 1;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (t < stride) s[t] = max(s[t], s[t + stride]);
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
})",
               [](Runner& r) {
                 const int n = 1000, threads = 128, blocks = (n + threads - 1) / threads;
                 auto x = uniform<int>(n, -1000000, 1000000, 31);
                 auto dx = r.input(x);
                 auto out = r.output<int>(blocks);
                 r.launch_shared({blocks}, {threads}, threads * sizeof(int), dx, out, n);
                 std::vector<int> want(blocks, INT32_MIN);
                 for (int i = 0; i < n; ++i) want[i / threads] = std::max(want[i / threads], x[i]);
                 r.expect_eq(r.read(out), want, "block maxima");
               }});

  v.push_back({"dynamic_shared_64k", R"(
// 64 KiB of dynamic shared memory: above the 48 KiB default, so a real GPU needs the opt-in.
extern "C" __global__ void dynamic_shared_64k(const float* x, float* y, int per_thread) {
  extern __shared__ float s[];
  int t = threadIdx.x, nt = blockDim.x;
  for (int k = 0; k < per_thread; ++k) s[k * nt + t] = x[blockIdx.x * nt * per_thread + k * nt + t];
  __syncthreads();
  int total = nt * per_thread;
  for (int k = 0; k < per_thread; ++k) {
    int j = k * nt + t;
    y[blockIdx.x * total + j] = s[total - 1 - j] + s[(j + 4097) % total];
  }
})",
               [](Runner& r) {
                 const int threads = 256, per = 64, total = threads * per,
                           blocks = 2;  // 16384 floats
                 auto x = uniform<float>(total * blocks, -1, 1, 32);
                 auto dx = r.input(x);
                 auto y = r.output<float>(total * blocks);
                 r.launch_shared({blocks}, {threads}, total * sizeof(float), dx, y, per);
                 std::vector<float> want(total * blocks);
                 for (int b = 0; b < blocks; ++b)
                   for (int j = 0; j < total; ++j)
                     want[b * total + j] =
                         x[b * total + total - 1 - j] + x[b * total + (j + 4097) % total];
                 r.expect_eq(r.read(y), want, "y");
               }});

  v.push_back({"shuffle_modes", R"(
extern "C" __global__ void shuffle_modes(int* out) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int v = lane * 7 + warp * 1000 + blockIdx.x * 100000;
  int* o = out + 8 * (blockIdx.x * blockDim.x + threadIdx.x);
  o[0] = __shfl_sync(0xffffffffu, v, (lane * 3) % 32);
  o[1] = __shfl_sync(0xffffffffu, v, 2, 8);
  o[2] = __shfl_up_sync(0xffffffffu, v, 3);
  o[3] = __shfl_up_sync(0xffffffffu, v, 3, 16);
  o[4] = __shfl_down_sync(0xffffffffu, v, 5);
  o[5] = __shfl_down_sync(0xffffffffu, v, 5, 8);
  o[6] = __shfl_xor_sync(0xffffffffu, v, 1);
  o[7] = __shfl_xor_sync(0xffffffffu, v, 20, 16);
})",
               [](Runner& r) {
                 const int blocks = 2, threads = 64, n = blocks * threads;
                 auto out = r.output<int>(8 * n);
                 r.launch({blocks}, {threads}, out);
                 std::vector<int> want(8 * n);
                 for (int g = 0; g < n; ++g) {
                   int lane = g % 32, warp = (g % threads) / 32, block = g / threads;
                   auto val = [&](int l) { return l * 7 + warp * 1000 + block * 100000; };
                   int* w = &want[8 * g];
                   w[0] = val(shfl_idx_src(lane, (lane * 3) % 32, 32));
                   w[1] = val(shfl_idx_src(lane, 2, 8));
                   w[2] = val(shfl_up_src(lane, 3, 32));
                   w[3] = val(shfl_up_src(lane, 3, 16));
                   w[4] = val(shfl_down_src(lane, 5, 32));
                   w[5] = val(shfl_down_src(lane, 5, 8));
                   w[6] = val(shfl_xor_src(lane, 1, 32));
                   w[7] = val(shfl_xor_src(lane, 20, 16));
                 }
                 r.expect_eq(r.read(out), want,
                             "shuffles (idx, idx/8, up, up/16, down, down/8, xor, xor/16)");
               }});

  v.push_back({"shuffle_f64", R"(
extern "C" __global__ void shuffle_f64(const double* x, double* out) {
  int lane = threadIdx.x & 31;
  double v = x[threadIdx.x];
  out[threadIdx.x] = __shfl_sync(0xffffffffu, v, 31 - lane) + __shfl_down_sync(0xffffffffu, v, 1);
})",
               [](Runner& r) {
                 auto x = uniform<double>(64, -1e10, 1e10, 33);
                 auto dx = r.input(x);
                 auto out = r.output<double>(64);
                 r.launch({1}, {64}, dx, out);
                 std::vector<double> want(64);
                 for (int t = 0; t < 64; ++t) {
                   int lane = t % 32, base = t - lane;
                   want[t] = x[base + 31 - lane] + x[base + shfl_down_src(lane, 1, 32)];
                 }
                 r.expect_eq(r.read(out), want, "out");
               }});

  v.push_back({"warp_reduce", R"(
extern "C" __global__ void warp_reduce(const int* x, const float* f, int* sums, float* maxima) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int s = x[i];
  for (int d = 16; d > 0; d >>= 1) s += __shfl_down_sync(0xffffffffu, s, d);
  float m = f[i];
  for (int d = 16; d > 0; d >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
  if ((threadIdx.x & 31) == 0) sums[i / 32] = s;
  maxima[i] = m;  // every lane holds the warp maximum after a butterfly
})",
               [](Runner& r) {
                 const int n = 256;
                 auto x = uniform<int>(n, -100000, 100000, 34);
                 auto f = uniform<float>(n, -1e3, 1e3, 35);
                 auto dx = r.input(x);
                 auto df = r.input(f);
                 auto sums = r.output<int>(n / 32);
                 auto maxima = r.output<float>(n);
                 r.launch({2}, {128}, dx, df, sums, maxima);
                 std::vector<int> ws(n / 32, 0);
                 std::vector<float> wm(n);
                 for (int i = 0; i < n; ++i) ws[i / 32] += x[i];
                 for (int i = 0; i < n; ++i)
                   wm[i] = *std::max_element(f.begin() + i / 32 * 32, f.begin() + i / 32 * 32 + 32);
                 r.expect_eq(r.read(sums), ws, "warp sums");
                 r.expect_eq(r.read(maxima), wm, "warp maxima");
               }});

  v.push_back({"warp_scan", R"(
extern "C" __global__ void warp_scan(const int* x, int* out) {
  int lane = threadIdx.x & 31;
  int v = x[threadIdx.x];
  for (int d = 1; d < 32; d <<= 1) {
    int up = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += up;
  }
  out[threadIdx.x] = v;
})",
               [](Runner& r) {
                 auto x = uniform<int>(96, -50, 50, 36);
                 auto dx = r.input(x);
                 auto out = r.output<int>(96);
                 r.launch({1}, {96}, dx, out);
                 std::vector<int> want(96);
                 for (int w = 0; w < 3; ++w)
                   std::inclusive_scan(x.begin() + 32 * w, x.begin() + 32 * w + 32,
                                       want.begin() + 32 * w);
                 r.expect_eq(r.read(out), want, "inclusive scans");
               }});

  v.push_back({"vote", R"(
extern "C" __global__ void vote(const int* x, unsigned* out) {
  int lane = threadIdx.x & 31;
  int v = x[threadIdx.x];
  unsigned* o = out + 6 * threadIdx.x;
  o[0] = __ballot_sync(0xffffffffu, v > 0);
  o[1] = __all_sync(0xffffffffu, v > -1000);
  o[2] = __any_sync(0xffffffffu, v > 90);
  o[3] = __all_sync(0xffffffffu, v > 0);
  o[4] = 0;
  if (lane < 10) o[4] = __activemask();  // only the lanes inside the branch
  o[5] = __syncthreads_count(v > 0) + 1000 * (__syncthreads_or(v > 95) != 0) +
         100000 * (__syncthreads_and(v > -1000) != 0);
})",
               [](Runner& r) {
                 const int n = 64;
                 auto x = uniform<int>(n, -100, 100, 37);
                 x[40] = 99;  // the second warp has a value above 90
                 for (int i = 0; i < 32; ++i) x[i] = std::min(x[i], 80);  // the first has none
                 auto dx = r.input(x);
                 auto out = r.output<unsigned>(6 * n);
                 r.launch({1}, {n}, dx, out);
                 std::vector<unsigned> want(6 * n);
                 int count = 0;
                 bool any95 = false;
                 for (int i = 0; i < n; ++i) count += x[i] > 0, any95 = any95 || x[i] > 95;
                 for (int w = 0; w < 2; ++w) {
                   unsigned ballot = 0;
                   bool all_pos = true, any90 = false;
                   for (int l = 0; l < 32; ++l) {
                     int val = x[32 * w + l];
                     ballot |= (val > 0 ? 1u : 0u) << l;
                     all_pos = all_pos && val > 0;
                     any90 = any90 || val > 90;
                   }
                   for (int l = 0; l < 32; ++l) {
                     unsigned* o = &want[6 * (32 * w + l)];
                     o[0] = ballot, o[1] = 1, o[2] = any90, o[3] = all_pos;
                     o[4] = l < 10 ? 0x3ffu : 0u;
                     o[5] = static_cast<unsigned>(count + 1000 * any95 + 100000);
                   }
                 }
                 r.expect_eq(r.read(out), want,
                             "ballot, all, any, all, activemask, syncthreads_count/or/and");
               }});

  v.push_back({"redux_match_partial", R"(
extern "C" __global__ void redux_match_partial(const int* x, unsigned* out) {
  int lane = threadIdx.x & 31;
  int v = x[threadIdx.x];
  unsigned* o = out + 6 * threadIdx.x;
  o[0] = (unsigned)__reduce_add_sync(0xffffffffu, v);
  o[1] = (unsigned)__reduce_min_sync(0xffffffffu, v);
  o[2] = __reduce_or_sync(0xffffffffu, (unsigned)v);
  o[3] = __match_any_sync(0xffffffffu, v & 3);
  o[4] = 0;
  o[5] = 0;
  if (lane < 16) {  // half the warp: shuffles and a barrier over a partial mask
    o[4] = (unsigned)__shfl_down_sync(0x0000ffffu, v, 1, 16);
    __syncwarp(0x0000ffffu);
    o[5] = __ballot_sync(0x0000ffffu, v > 50);
  }
})",
               [](Runner& r) {
                 const int n = 64;
                 auto x = uniform<int>(n, 0, 100, 38);
                 auto dx = r.input(x);
                 auto out = r.output<unsigned>(6 * n);
                 r.launch({1}, {n}, dx, out);
                 std::vector<unsigned> want(6 * n);
                 for (int w = 0; w < 2; ++w) {
                   int sum = 0, mn = INT32_MAX;
                   unsigned orr = 0, low_ballot = 0;
                   for (int l = 0; l < 32; ++l) {
                     int val = x[32 * w + l];
                     sum += val, mn = std::min(mn, val), orr |= static_cast<unsigned>(val);
                     if (l < 16 && val > 50) low_ballot |= 1u << l;
                   }
                   for (int l = 0; l < 32; ++l) {
                     unsigned* o = &want[6 * (32 * w + l)];
                     unsigned match = 0;
                     for (int m = 0; m < 32; ++m)
                       if ((x[32 * w + m] & 3) == (x[32 * w + l] & 3)) match |= 1u << m;
                     o[0] = static_cast<unsigned>(sum), o[1] = static_cast<unsigned>(mn),
                     o[2] = orr;
                     o[3] = match;
                     o[4] =
                         l < 16 ? static_cast<unsigned>(x[32 * w + (l + 1 < 16 ? l + 1 : l)]) : 0u;
                     o[5] = l < 16 ? low_ballot : 0u;
                   }
                 }
                 r.expect_eq(r.read(out), want,
                             "redux add/min/or, match_any, partial-mask shfl and ballot");
               }});

  return v;
}

Register reg("corpus_parallel", cases);

}  // namespace
}  // namespace corpus
