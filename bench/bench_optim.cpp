// An optimizer step over 100 parameters of mixed sizes on the CUDA device, fused (one multi-tensor
// launch per dtype group) against the reference ops run on the device (set_fused(false)), in one
// run: per warm step, the generated-kernel launches, the DRAM bytes the virtual GPU's profiler
// measures, those bytes per parameter element against the ideal (each of a step's tensors read
// once and each it updates written once: AdamW f32 28 bytes, SGD with momentum 20), and host time.
// Also gradient-norm clipping (two launches). On a real GPU the profiler's figures are absent.
// KILN_BENCH_REPS: warm steps timed per mode (default 3).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/optim.h"
#include "jit/codegen/launch_stats.h"
#include "runtime/cuda/backend.h"
#include "runtime/cuda/virtual/profiler.h"
#include "runtime/grad_mode.h"
#include "runtime/random.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

// 100 sizes from 1 element to 64k, as a model's biases, norms and weights mix (odd ones too).
std::vector<std::int64_t> parameter_sizes() {
  const std::int64_t pattern[] = {1, 7, 64, 257, 1024, 4097, 16384, 3, 32768, 65536};
  std::vector<std::int64_t> sizes;
  for (int i = 0; i < 100; ++i) sizes.push_back(pattern[i % 10] + (i / 10) % 3);
  return sizes;
}

struct Parameters {
  std::vector<Tensor> params;
  std::int64_t elements = 0, bytes = 0;  // of the parameters alone
};

// Parameters (every other one bf16 when `mixed`) with random gradients.
Parameters make_parameters(bool mixed, std::uint64_t seed) {
  NoGradGuard no_grad;
  Generator gen(seed);
  Parameters out;
  auto sizes = parameter_sizes();
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    DType dtype = mixed && i % 2 == 1 ? DType::bf16 : DType::f32;
    Tensor p = randn({sizes[i]}, DType::f32, &gen).to(dtype).to(Device::cuda());
    p.requires_grad_();
    p.set_grad(randn({sizes[i]}, DType::f32, &gen).to(dtype).to(Device::cuda()));
    out.params.push_back(p);
    out.elements += sizes[i];
    out.bytes += sizes[i] * static_cast<std::int64_t>(itemsize(dtype));
  }
  return out;
}

struct Figures {
  std::int64_t launches = 0, dram_bytes = 0, elements = 0;
  std::int64_t ideal_bytes =
      0;  // every tensor of the step read once, each updated one written once
  double warm_ms = 0;
};

// One cold step, `reps` timed warm steps, then one warm step measured by the counters.
Figures measure(const std::function<void()>& step, const Parameters& params, int accesses,
                int reps) {
  step();
  auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) step();
  Figures f;
  f.warm_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / reps;
  f.elements = params.elements;
  f.ideal_bytes = params.bytes * accesses;
  std::int64_t launches = jit::codegen::launch_stats().launches.load();
  cuda::vgpu::clear_profiles();
  cuda::vgpu::set_profiling(true);
  step();
  cuda::vgpu::set_profiling(false);
  for (const auto& p : cuda::vgpu::profiles())
    f.dram_bytes += static_cast<std::int64_t>(p.dram_bytes());
  cuda::vgpu::clear_profiles();
  f.launches = jit::codegen::launch_stats().launches.load() - launches;
  return f;
}

void print_row(const char* label, const Figures& f, bool profiled) {
  double per_element = static_cast<double>(f.dram_bytes) / static_cast<double>(f.elements);
  double ideal_per_element = static_cast<double>(f.ideal_bytes) / static_cast<double>(f.elements);
  if (profiled)
    std::printf("%-34s %9lld %12.1f kB %10.2f %8.1f %+9.1f%% %10.1f ms\n", label,
                static_cast<long long>(f.launches), f.dram_bytes / 1e3, per_element,
                ideal_per_element, 100.0 * (per_element / ideal_per_element - 1.0), f.warm_ms);
  else
    std::printf("%-34s %9lld %15s %10s %8.1f %10s %10.1f ms\n", label,
                static_cast<long long>(f.launches), "n/a", "n/a", ideal_per_element, "n/a",
                f.warm_ms);
}

}  // namespace

int main() {
  const char* reps_env = std::getenv("KILN_BENCH_REPS");
  const int reps = reps_env ? std::max(1, std::atoi(reps_env)) : 3;
  std::filesystem::path cache =
      std::filesystem::temp_directory_path() / ("kiln-bench-optim-" + std::to_string(getpid()));
  setenv("KILN_CACHE_DIR", cache.c_str(), 1);
  bool profiled = cuda::backend().properties(0).is_virtual;

  Parameters f32 = make_parameters(false, 1), mixed = make_parameters(true, 2);
  std::printf("optimizer step over %zu parameters (1 to 65538 elements, %lld in all) on %s\n",
              f32.params.size(), static_cast<long long>(f32.elements),
              profiled ? "the virtual GPU" : "the GPU");
  std::printf("%-34s %9s %15s %10s %8s %10s %13s\n", "", "launches", "DRAM", "B/elem", "ideal",
              "vs ideal", "warm step");

  struct Mode {
    const char* label;
    std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)> make;
    bool fused, mixed;
    int accesses;  // tensor-sized reads and writes of an ideal step
  };
  auto adamw = [](std::vector<Tensor> p) { return std::make_unique<optim::AdamW>(p, 1e-3); };
  auto sgd = [](std::vector<Tensor> p) { return std::make_unique<optim::SGD>(p, 1e-3, 0.9); };
  // AdamW reads p, g, m, v and writes p, m, v (f32: 28 bytes per element); SGD with momentum
  // reads p, g, b and writes p, b (20). The mixed list: every other parameter (and its state) bf16.
  const Mode modes[] = {
      {"AdamW f32, per op", adamw, false, false, 7},
      {"AdamW f32, fused", adamw, true, false, 7},
      {"AdamW f32 + bf16, fused", adamw, true, true, 7},
      {"SGD momentum f32, per op", sgd, false, false, 5},
      {"SGD momentum f32, fused", sgd, true, false, 5},
  };
  for (const Mode& m : modes) {
    const Parameters& params = m.mixed ? mixed : f32;
    auto opt = m.make(params.params);
    opt->set_fused(m.fused);
    print_row(m.label, measure([&] { opt->step(); }, params, m.accesses, reps), profiled);
  }
  // Clipping: the norm reads each gradient once; scaling reads and writes it again. A max_norm of
  // 0 clips on every call (any positive limit stops clipping once the first call has clipped).
  print_row("clip_grad_norm_ f32 (max_norm 0)",
            measure([&] { optim::clip_grad_norm_tensor_(f32.params, 0.0); }, f32, 3, reps),
            profiled);
  print_row("clip_grad_norm_ f32 (no clipping)",
            measure([&] { optim::clip_grad_norm_tensor_(f32.params, 1e30); }, f32, 1, reps),
            profiled);
  std::filesystem::remove_all(cache);
  return 0;
}
