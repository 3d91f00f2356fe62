// NVRTC compile latency for a small elementwise kernel: median, min and max of 20 compiles, for
// PTX (the virtual GPU) and sm_90a cubin (a real H100) targets, default and fast-math options.
// Then the cold compile of a graph's several kernels three ways: one after another, on a thread
// pool (what prepare_kernels does), and as one NVRTC program holding them all.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "runtime/cuda/nvrtc/nvrtc.h"

namespace {

const char* kSource = R"(
extern "C" __global__ void gelu_bias(const float* x, const float* bias, float* y, int n, int cols) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i] + bias[i % cols];
  y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
}
)";

void bench(const char* label, const kiln::nvrtc::Target& target, bool fast_math) {
  kiln::nvrtc::ProgramOptions options;
  if (fast_math) options.flags.push_back("--use_fast_math");
  kiln::nvrtc::compile_program(kSource, "gelu_bias.cu", target,
                               options);  // warm-up: loads NVRTC's state
  std::vector<double> ms;
  for (int i = 0; i < 20; ++i) {
    auto start = std::chrono::steady_clock::now();
    kiln::nvrtc::compile_program(kSource, "gelu_bias.cu", target, options);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  double median = (ms[9] + ms[10]) / 2;
  std::printf("%-28s %-10s median %7.2f ms  min %7.2f ms  max %7.2f ms  (20 compiles)\n", label,
              target.arch().c_str(), median, ms.front(), ms.back());
}

// A graph's kernels: `n` distinct bf16 kernels, each with its own headers, as kiln renders them.
std::vector<std::string> graph_kernels(int n) {
  std::vector<std::string> sources;
  for (int k = 0; k < n; ++k)
    sources.push_back(fmt::format(R"(#include <cuda_bf16.h>
extern "C" __global__ void k{0}(const __nv_bfloat16* x, const float* bias, __nv_bfloat16* y,
                                long long n, long long cols) {{
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {{
    float v = __bfloat162float(x[i]) * {1}.0f + bias[i % cols];
    y[i] = __float2bfloat16(0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v))));
  }}
}}
)",
                                  k, k + 2));
  return sources;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

void bench_graph(int n, const kiln::nvrtc::Target& target) {
  auto sources = graph_kernels(n);
  auto start = std::chrono::steady_clock::now();
  for (int k = 0; k < n; ++k)
    kiln::nvrtc::compile_program(sources[k], fmt::format("k{}.cu", k), target);
  double sequential = ms_since(start);

  unsigned threads = std::max(1u, std::min<unsigned>(n, std::thread::hardware_concurrency()));
  start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int k = static_cast<int>(t); k < n; k += static_cast<int>(threads))
        kiln::nvrtc::compile_program(sources[k], fmt::format("k{}.cu", k), target);
    });
  for (auto& t : pool) t.join();
  double pooled = ms_since(start);

  std::string all;
  for (const auto& s : sources) all += s;
  start = std::chrono::steady_clock::now();
  kiln::nvrtc::compile_program(all, "graph.cu", target);
  double one_program = ms_since(start);
  std::printf(
      "%2d kernels, %-8s  one by one %7.1f ms   thread pool (%u) %7.1f ms   one program "
      "%7.1f ms\n",
      n, target.arch().c_str(), sequential, threads, pooled, one_program);
}

}  // namespace

int main() {
  std::printf("%s\n", kiln::nvrtc::version().to_string().c_str());
  bench("PTX, default", kiln::nvrtc::Target::ptx(9, 0), false);
  bench("PTX, --use_fast_math", kiln::nvrtc::Target::ptx(9, 0), true);
  bench("cubin + ptxas -v, default", kiln::nvrtc::Target::sass(9, 0, true), false);
  std::printf("\na graph's cold compile (%u hardware threads):\n",
              std::thread::hardware_concurrency());
  for (int n : {2, 4, 8}) bench_graph(n, kiln::nvrtc::Target::ptx(9, 0));
  bench_graph(8, kiln::nvrtc::Target::sass(9, 0, true));
  return 0;
}
