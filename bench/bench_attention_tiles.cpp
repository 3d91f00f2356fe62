// The FlashAttention kernels' tiles per GPU architecture (jit/codegen/attention_tiling.h): for
// each shared-memory budget the virtual GPU models (a 48 KB device, sm_86's 99 KB, sm_80's 163
// KB, sm_90's 227 KB), the tiles the forward and backward take at a shape, and what the virtual
// GPU's profiler says of them: DRAM bytes (distinct sectors), thread-instructions and its H100
// roofline time (a model, not a measurement, and the same H100 whatever the budget: it shows
// what the tiles change in traffic and issue, not each architecture's speed). Shapes: f32 at
// head dim 256 and bf16 at 128, 2 heads, T = S = KILN_BENCH_T (default 128).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>

#include "jit/codegen/attention.h"
#include "runtime/cuda/virtual/profiler.h"
#include "runtime/cuda/virtual/virtual_backend.h"
#include "runtime/cuda_backend.h"
#include "runtime/random.h"

using namespace kiln;
namespace codegen = kiln::jit::codegen;
namespace vgpu = kiln::cuda::vgpu;

namespace {

struct Row {
  std::string kernel;
  double dram_mb = 0, instructions_m = 0, modeled_us = 0;
};

// The kernel run under the profiler: its name (which carries its tiles) and measures.
template <typename F>
Row measure(F&& run) {
  vgpu::clear_profiles();
  vgpu::set_profiling(true);
  run();
  cuda::backend().synchronize();
  vgpu::set_profiling(false);
  Row r;
  for (const auto& p : vgpu::profiles()) {
    r.kernel = p.kernel;
    r.dram_mb += static_cast<double>(p.dram_bytes()) / 1e6;
    r.instructions_m += static_cast<double>(p.thread_instructions) / 1e6;
    r.modeled_us += p.modeled_h100_us();
  }
  vgpu::clear_profiles();
  return r;
}

}  // namespace

int main() {
  KILN_CHECK(cuda::backend().kind() == "virtual",
             "bench_attention_tiles models architectures on the virtual GPU: run with "
             "KILN_CUDA=virtual");
  const char* env = std::getenv("KILN_BENCH_T");
  const long long t = env ? std::atoll(env) : 128, heads = 2;
  std::printf("attention tiles per shared-memory budget, 2 heads, T = S = %lld\n", t);
  std::printf("  %-5s %4s %-7s %-9s %-56s %8s %10s %8s\n", "dtype", "d", "device", "kernel",
              "name (w: warps, n/s: streamed rows/stages)", "DRAM MB", "M instr", "H100 us");
  for (auto [dtype, d] : {std::tuple{DType::f32, 256LL}, std::tuple{DType::bf16, 128LL}}) {
    Generator gen(5);
    auto make = [&] { return randn({heads, t, d}, DType::f32, &gen).to(dtype).to(Device::cuda()); };
    Tensor q = make(), k = make(), v = make(), dout = make();
    codegen::AttentionCall call{q, k, v, std::nullopt, 1.0 / std::sqrt(double(d)), false};
    for (auto [label, major, minor, optin] :
         {std::tuple{"48 KB", 9, 0, 48 * 1024}, std::tuple{"sm_86", 8, 6, 0},
          std::tuple{"sm_80", 8, 0, 0}, std::tuple{"sm_90", 9, 0, 0}}) {
      vgpu::set_compute_capability(cuda::backend(), major, minor);
      if (optin) vgpu::set_shared_memory_optin(cuda::backend(), optin);
      if (std::string why = codegen::attention_unsupported(call); !why.empty()) {
        std::printf("  %-5s %4lld %-7s refused: %.90s...\n", std::string(dtype_name(dtype)).c_str(),
                    d, label, why.c_str());
        continue;
      }
      codegen::AttentionForward fwd;
      Row f = measure([&] { fwd = codegen::attention_forward(call); });
      Row b = measure([&] { codegen::attention_backward(call, fwd.out, fwd.lse, dout); });
      for (auto [kind, r] : {std::tuple{"forward", f}, std::tuple{"backward", b}})
        std::printf("  %-5s %4lld %-7s %-9s %-56s %8.3f %10.2f %8.2f\n",
                    std::string(dtype_name(dtype)).c_str(), d, label, kind, r.kernel.c_str(),
                    r.dram_mb, r.instructions_m, r.modeled_us);
    }
  }
  vgpu::set_compute_capability(cuda::backend(), 9, 0);
  std::printf(
      "\nH100 us: the profiler's roofline (DRAM, issue, tensor-core peaks, 3 us a launch) of an "
      "H100\nfor every row; it does not model occupancy, latency hiding or each architecture.\n");
  return 0;
}
