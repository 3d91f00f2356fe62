// The generated GEMM (the fallback for matmuls cuBLASLt's rules refuse) on its FMA kernel and on
// tensor cores, launched directly on the virtual GPU, whose profiler counts mma instructions and
// tensor-core flops and models an H100's time: 256 x 256 x 256 in bf16 and f16 (FMA kernel vs
// mma.sync.m16n8k16) and in f32 (FMA kernel vs TF32 mma.sync.m16n8k8), with bank conflicts, DRAM
// traffic and the interpreter's time. The sizes are fixed: the FMA kernel of a larger product
// takes the interpreter minutes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "jit/codegen/lt_matmul.h"
#include "jit/codegen/matmul.h"
#include "runtime/cuda/virtual/profiler.h"
#include "runtime/random.h"

using namespace kiln;
namespace codegen = kiln::jit::codegen;
namespace vgpu = kiln::cuda::vgpu;
using Clock = std::chrono::steady_clock;

namespace {

struct Figures {
  std::string kernel;
  std::uint64_t mma = 0, tensor_flops = 0, bank_conflicts = 0, dram = 0;
  double modeled_us = 0, memory_us = 0, issue_us = 0, tensor_us = 0, host_s = 0;
  const char* bound = "";
  double roofline() const { return std::max({memory_us, issue_us, tensor_us}); }
};

Figures run(const Tensor& a, const Tensor& b, DType out, const codegen::MatmulVariant& v) {
  auto kernel = codegen::render_matmul(a.dtype(), b.dtype(), out, 0);
  TensorMeta meta{Shape{a.shape()[0], b.shape()[1]}, out};
  codegen::run_matmul(kernel, a, b, meta, v);  // compiles; the measured call below is warm
  vgpu::set_profiling(true);
  vgpu::clear_profiles();
  auto start = Clock::now();
  Tensor c = codegen::run_matmul(kernel, a, b, meta, v);
  (void)c.to(Device::cpu());
  Figures f;
  f.host_s = std::chrono::duration<double>(Clock::now() - start).count();
  vgpu::set_profiling(false);
  for (const auto& p : vgpu::profiles()) {
    f.kernel = p.kernel;
    f.mma += p.mma_instructions;
    f.tensor_flops += p.mma_flops_f16 + p.mma_flops_tf32;
    f.bank_conflicts += p.bank_conflicts;
    f.dram += p.dram_bytes();
    f.modeled_us += p.modeled_h100_us();
    f.memory_us += p.memory_us();
    f.issue_us += p.issue_us();
    f.tensor_us += p.tensor_us();
    f.bound = vgpu::bound_name(p.bound());
  }
  vgpu::clear_profiles();
  return f;
}

void row(const char* what, const Figures& f) {
  std::printf("%-10s %-34s %6llu %8.1f %9llu %7.2f %7.2f %7.2f %7.2f %7.2f %-6s %6.2f\n", what,
              f.kernel.c_str(), static_cast<unsigned long long>(f.mma), f.tensor_flops / 1e6,
              static_cast<unsigned long long>(f.bank_conflicts), f.dram / 1e6, f.memory_us,
              f.issue_us, f.tensor_us, f.modeled_us, f.bound, f.host_s);
}

}  // namespace

int main() {
  constexpr long n = 256;
  manual_seed(1);
  std::printf(
      "generated GEMM %ld x %ld x %ld on the virtual GPU (tiles: FMA 16 x 16, tensor cores 64 x "
      "64 x 32)\n\n",
      n, n, n);
  std::printf("%-10s %-34s %6s %8s %9s %7s %7s %7s %7s %7s %-6s %6s\n", "variant", "kernel", "mma",
              "TC Mflop", "wavefr+", "DRAM MB", "mem us", "issue us", "TC us", "H100 us", "bound",
              "interp s");
  for (DType t : {DType::bf16, DType::f16, DType::f32}) {
    Tensor a = randn({n, n}).to(t).to(Device::cuda()), b = randn({n, n}).to(t).to(Device::cuda());
    codegen::MatmulVariant fma;
    codegen::set_allow_tf32(t == DType::f32);
    codegen::MatmulVariant mma = codegen::matmul_variant(a, b, t);
    codegen::set_allow_tf32(false);
    Figures x = run(a, b, t, fma), y = run(a, b, t, mma);
    std::string name(dtype_name(t));
    row((name + " FMA").c_str(), x);
    row((name + (t == DType::f32 ? " TF32" : " mma")).c_str(), y);
    std::printf(
        "%-10s modeled H100 time %.2fx lower on tensor cores (%.1fx past the launch "
        "latency)\n\n",
        "", x.modeled_us / y.modeled_us, x.roofline() / y.roofline());
  }
  std::printf(
      "mma: warp-level mma.sync instructions; TC Mflop: their flops (2 M N K each, zero-padded "
      "tails included); wavefr+: shared-memory wavefronts beyond one per request (a request of 16 "
      "bytes per lane, cp.async or ldmatrix.x4, takes 4 by itself); DRAM MB: distinct 32-byte "
      "sectors; mem / issue / TC us: the profiler's roofline terms (DRAM, instruction issue, "
      "tensor-core peak) and H100 us the longest plus 3 us launch latency, a lower bound for "
      "mma.sync; interp s: the interpreter's host time.\n");
  return 0;
}
