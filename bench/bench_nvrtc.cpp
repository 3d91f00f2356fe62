// NVRTC compile latency for a small elementwise kernel: median, min and max of 20 compiles, for
// PTX (the virtual GPU) and sm_90a cubin (a real H100) targets, default and fast-math options.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "jit/nvrtc/nvrtc.h"

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

}  // namespace

int main() {
  std::printf("%s\n", kiln::nvrtc::version().to_string().c_str());
  bench("PTX, default", kiln::nvrtc::Target::ptx(9, 0), false);
  bench("PTX, --use_fast_math", kiln::nvrtc::Target::ptx(9, 0), true);
  bench("cubin + ptxas -v, default", kiln::nvrtc::Target::sass(9, 0, true), false);
  return 0;
}
