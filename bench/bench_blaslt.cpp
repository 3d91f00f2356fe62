// matmul + bias + activation on cuBLASLt epilogues: the MLP block of issue 11 (x[R, 1024] ->
// Linear H -> GELU-tanh -> Linear 1024) in f16 and bf16, three ways: eager as a PyTorch user
// writes it (nn::Linear, gelu, nn::Linear: one call or kernel per op), compiled forward (bias and
// activation in the GEMM's epilogue), and nn::FeedForward (2 library calls forward, 4 backward,
// no generated kernels). Reports library calls, generated kernels, global bytes (kernels:
// measured by the virtual GPU's profiler; library calls: each operand once) and a modeled H100
// time (kernels: the profiler's model; library calls: max(bytes / 3.35 TB/s, flops / 989
// TFLOP/s)). Sizes: KILN_BENCH_ROWS (R, default 4096) and KILN_BENCH_HIDDEN (H, default 4096);
// the virtual GPU runs the GEMMs on the host's cores and interprets the kernels, so smaller is
// faster, and the figures scale with R * H.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/lt_matmul.h"
#include "jit/compile.h"
#include "runtime/cuda/virtual/profiler.h"

using namespace kiln;

namespace {

std::int64_t env_or(const char* name, std::int64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoll(v) : fallback;
}

struct Counts {
  std::int64_t calls = 0, kernels = 0, bytes = 0;
  double modeled_us = 0;
};

// `flops` of the library calls the block makes, for the time model.
Counts measure(const std::function<void()>& run, double flops) {
  auto& ks = jit::codegen::launch_stats();
  auto& ls = jit::codegen::lt_stats();
  std::int64_t k0 = ks.launches, c0 = ls.calls, b0 = ls.bytes_read + ls.bytes_written;
  namespace vgpu = cuda::vgpu;
  vgpu::set_profiling(true);
  vgpu::clear_profiles();
  run();
  vgpu::set_profiling(false);
  Counts c;
  c.kernels = ks.launches - k0;
  c.calls = ls.calls - c0;
  std::int64_t lib_bytes = ls.bytes_read + ls.bytes_written - b0;
  c.bytes = lib_bytes;
  for (const auto& p : vgpu::profiles()) {
    c.bytes += static_cast<std::int64_t>(p.dram_bytes());
    c.modeled_us += p.modeled_h100_us();
  }
  c.modeled_us += std::max(lib_bytes / 3.35e12, flops / 989e12) * 1e6;
  return c;
}

void print(const char* what, DType t, const Counts& c) {
  std::printf("%-28s %-5s %6lld %8lld %12.1f %10.1f\n", what, std::string(dtype_name(t)).c_str(),
              static_cast<long long>(c.calls), static_cast<long long>(c.kernels), c.bytes / 1e6,
              c.modeled_us);
  std::fflush(stdout);
}

}  // namespace

int main() {
  const std::int64_t rows = env_or("KILN_BENCH_ROWS", 4096), d = 1024,
                     h = env_or("KILN_BENCH_HIDDEN", 4096);
  std::printf("MLP block x[%lld, %lld] -> Linear %lld -> GELU-tanh -> Linear %lld\n",
              static_cast<long long>(rows), static_cast<long long>(d), static_cast<long long>(h),
              static_cast<long long>(d));
  std::printf("%-28s %-5s %6s %8s %12s %10s\n", "", "dtype", "calls", "kernels", "MB", "model us");
  const double fwd_flops = 2.0 * 2 * rows * d * h;
  for (DType t : {DType::f16, DType::bf16}) {
    Generator gen(1);
    nn::Linear fc1(d, h, true, t, &gen), fc2(h, d, true, t, &gen);
    Generator same(1);  // the same weights as fc1, fc2
    nn::FeedForward ff(d, h, d, Activation::gelu_tanh, true, t, &same);
    fc1.to(Device::cuda());
    fc2.to(Device::cuda());
    ff.to(Device::cuda());
    Tensor x = randn({rows, d}, t).to(Device::cuda());
    auto block = [&](const Tensor& x) { return fc2(gelu(fc1(x), GeluApproximation::tanh)); };
    {
      NoGradGuard no_grad;
      print("forward, eager", t, measure([&] { (void)block(x); }, fwd_flops));
      jit::CompileOptions options;
      options.modules = {&fc1, &fc2};
      auto compiled = jit::compile(block, options);
      (void)compiled(x);  // trace and compile
      print("forward, compiled", t, measure([&] { (void)compiled(x); }, fwd_flops));
      print("forward, FeedForward", t, measure([&] { (void)ff(x); }, fwd_flops));
    }
    // Training: x needs its gradient too (a layer inside a model), so backward is 4 GEMMs.
    Tensor xg = x.detach();
    xg.requires_grad_();
    Tensor y;
    print("forward+aux, eager", t, measure([&] { y = block(xg); }, fwd_flops));
    Tensor g = ones_like(y);
    print("backward, eager autograd", t, measure([&] { y.backward(g); }, 2 * fwd_flops));
    xg.set_grad(Tensor());  // counted from the zero-grad state: no accumulation kernel
    print("forward+aux, FeedForward", t, measure([&] { y = ff(xg); }, fwd_flops));
    print("backward, FeedForward", t, measure([&] { y.backward(g); }, 2 * fwd_flops));
  }
  return 0;
}
