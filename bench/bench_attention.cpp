// What the fused attention kernels (jit/codegen/attention) move, measured by the virtual GPU's
// profiler: the FlashAttention forward and backward against their ideal traffic (each input read
// once, each output written once) and against the unfused path (matmul, scale, softmax, matmul
// as separate ops, and autograd's backward of them), with the bytes allocated beyond inputs and
// outputs at the peak of each. At the target size: T = 1024, head dim 64, 4 heads, bf16.
// KILN_BENCH_T, KILN_BENCH_HEADS, KILN_BENCH_D, KILN_BENCH_BATCH override the sizes;
// KILN_BENCH_TABLE=1 prints the per-kernel profiles on stderr.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "jit/codegen/attention.h"
#include "jit/codegen/lt_matmul.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/virtual/profiler.h"
#include "runtime/cuda_backend.h"
#include "runtime/random.h"

using namespace kiln;
namespace codegen = kiln::jit::codegen;
namespace vgpu = kiln::cuda::vgpu;

namespace {

long long env_or(const char* name, long long fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoll(v) : fallback;
}

struct Measured {
  std::int64_t dram = 0;          // kernels' DRAM bytes (profiler) + library operands
  std::int64_t intermediate = 0;  // peak bytes allocated beyond the inputs and the outputs
  std::uint64_t mma = 0;          // tensor-core instructions
  int launches = 0;
  double modeled_us = 0;  // the profiler's H100 roofline model, summed over launches
  double host_s = 0;      // the interpreter's wall time
};

std::int64_t bytes_of(const std::vector<Tensor>& ts) {
  std::int64_t n = 0;
  for (const auto& t : ts) n += t.numel() * static_cast<std::int64_t>(itemsize(t.dtype()));
  return n;
}

// Runs `fn` (returning its outputs) under the profiler and the allocator's peak.
Measured measure(const char* label, const std::function<std::vector<Tensor>()>& fn) {
  auto& alloc = cuda_allocator();
  std::size_t before = alloc.stats().allocated;
  alloc.reset_peak();
  auto lib = codegen::lt_stats().bytes_read.load() + codegen::lt_stats().bytes_written.load();
  vgpu::clear_profiles();
  vgpu::set_profiling(true);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Tensor> outs = fn();
  cuda::backend().synchronize();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  vgpu::set_profiling(false);
  Measured m;
  m.host_s = secs;
  for (const auto& p : vgpu::profiles()) {
    m.dram += static_cast<std::int64_t>(p.dram_bytes());
    m.mma += p.mma_instructions;
    m.launches += static_cast<int>(p.launches);
    m.modeled_us += p.modeled_h100_us();
  }
  m.dram += codegen::lt_stats().bytes_read.load() + codegen::lt_stats().bytes_written.load() - lib;
  m.intermediate = static_cast<std::int64_t>(alloc.stats().peak_allocated) -
                   static_cast<std::int64_t>(before) - bytes_of(outs);
  if (const char* table = std::getenv("KILN_BENCH_TABLE"); table && std::string(table) == "1")
    std::fprintf(stderr, "%s, per kernel:\n%s\n", label,
                 vgpu::profile_table(vgpu::profiles()).c_str());
  vgpu::clear_profiles();
  return m;
}

std::string mb(std::int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", static_cast<double>(bytes) / 1e6);
  return b;
}

}  // namespace

int main() {
  KILN_CHECK(cuda::backend().kind() == "virtual",
             "bench_attention measures traffic with the virtual GPU's profiler: run with "
             "KILN_CUDA=virtual");
  const long long t = env_or("KILN_BENCH_T", 1024), heads = env_or("KILN_BENCH_HEADS", 4),
                  d = env_or("KILN_BENCH_D", 64), batch = env_or("KILN_BENCH_BATCH", 1);
  const DType dtype = DType::bf16;
  Generator gen(3);
  auto make = [&](long long rows) {
    return randn({batch, heads, rows, d}, DType::f32, &gen).to(dtype).to(Device::cuda());
  };
  Tensor q = make(t), k = make(t), v = make(t), dout = make(t);
  double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::printf(
      "attention at batch %lld, %lld heads, T = S = %lld, head dim %lld, %s (target: T = 1024,\n"
      "d = 64, 4 heads, bf16). MB: DRAM traffic the virtual GPU's profiler measured (distinct\n"
      "32-byte sectors per launch) plus cuBLASLt operands; ideal: each input read once, each\n"
      "output written once; 'extra MB': peak bytes allocated beyond inputs and outputs;\n"
      "'unfused': matmul, scale, softmax, matmul as separate ops (and autograd's backward).\n\n",
      batch, heads, t, d, std::string(dtype_name(dtype)).c_str());

  const std::int64_t elem = static_cast<std::int64_t>(itemsize(dtype));
  const std::int64_t tensor = batch * heads * t * d * elem, rows = batch * heads * t * 4;
  const std::int64_t ideal_fwd = 3 * tensor + tensor + rows;      // q k v -> out, lse
  const std::int64_t ideal_bwd = 5 * tensor + rows + 3 * tensor;  // q k v out dout lse -> dq dk dv

  for (bool causal : {false, true}) {
    codegen::AttentionCall call{q, k, v, std::nullopt, scale, causal};
    codegen::AttentionForward fwd;
    Measured fused_f = measure("fused forward", [&] {
      fwd = codegen::attention_forward(call);
      return std::vector<Tensor>{fwd.out, fwd.lse};
    });
    Measured fused_b = measure("fused backward", [&] {
      auto g = codegen::attention_backward(call, fwd.out, fwd.lse, dout);
      return std::vector<Tensor>{g.dq, g.dk, g.dv};
    });
    // The unfused path: the ops a user writes, each its own kernel or cuBLASLt call.
    Tensor qg = q.detach().requires_grad_(), kg = k.detach().requires_grad_(),
           vg = v.detach().requires_grad_();
    Tensor out;
    Tensor causal_mask;
    if (causal) causal_mask = (tril(ones({t, t}, DType::f32), 0) == 0).to(Device::cuda());
    Measured plain_f = measure("unfused forward", [&] {
      Tensor s = matmul(qg, kg.transpose(-2, -1)) * scale;
      if (causal) s = masked_fill(s, causal_mask, -INFINITY);
      out = matmul(softmax(s, -1), vg);
      return std::vector<Tensor>{out};
    });
    Measured plain_b = measure("unfused backward", [&] {
      out.backward(dout);
      return std::vector<Tensor>{qg.grad(), kg.grad(), vg.grad()};
    });
    out = Tensor();

    std::printf("%s\n", causal ? "causal" : "no mask");
    std::printf("  %-17s %8s %8s %7s %9s %7s %9s %7s %8s %9s\n", "", "MB", "ideal MB", "x ideal",
                "unfused", "x fewer", "extra MB", "mma", "H100 us", "interp s");
    auto line = [&](const char* name, const Measured& f, std::int64_t ideal, const Measured& u) {
      std::printf("  %-17s %8s %8s %7.3f %9s %7.1f %9s %7llu %8.1f %9.1f\n", name,
                  mb(f.dram).c_str(), mb(ideal).c_str(),
                  static_cast<double>(f.dram) / static_cast<double>(ideal), mb(u.dram).c_str(),
                  static_cast<double>(u.dram) / static_cast<double>(f.dram),
                  mb(f.intermediate).c_str(), static_cast<unsigned long long>(f.mma), f.modeled_us,
                  f.host_s);
    };
    auto plain = [&](const char* name, const Measured& u) {
      std::printf("  %-17s %8s %8s %7s %9s %7s %9s %7llu %8.1f %9.1f\n", name, mb(u.dram).c_str(),
                  "", "", "", "", mb(u.intermediate).c_str(),
                  static_cast<unsigned long long>(u.mma), u.modeled_us, u.host_s);
    };
    line("fused forward", fused_f, ideal_fwd, plain_f);
    line("fused backward", fused_b, ideal_bwd, plain_b);
    plain("unfused forward", plain_f);
    plain("unfused backward", plain_b);
    std::printf("\n");
  }
  std::printf(
      "H100 us: the profiler's roofline model (DRAM, instruction issue and tensor-core peaks, 3 "
      "us\n"
      "per launch), not a measurement; cuBLASLt calls of the unfused path are not in it.\n");
  return 0;
}
