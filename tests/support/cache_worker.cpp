// A helper process for test_cache_tool: compiles kernels through the kernel cache the way kiln does
// and prints what it took, so tests can run several processes on one cache directory.
//   kiln_cache_worker kernels FIRST COUNT [REPEAT]  COUNT distinct kernels (FIRST...), each
//                                                    looked up REPEAT times (default 1); kernel
//                                                    FIRST is launched and its result checked
//   kiln_cache_worker graph                          a compiled function on CUDA tensors
// Prints "compiles=C disk_hits=D memory_hits=M stores=S healed=H" on stdout; exits 1 on error.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "autograd/ops.h"
#include "cache/kernel_store.h"
#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/launch_stats.h"
#include "jit/compile.h"

using namespace kiln;

namespace {

std::string kernel_name(int i) {
  return "k_worker_" + std::to_string(i);
}

std::string kernel_source(int i) {
  return "// " + kernel_name(i) + ": y = x * " + std::to_string(i) +
         " + 1, a test kernel\nextern \"C\" __global__ void " + kernel_name(i) +
         "(float* x, int n) {\n  int t = blockIdx.x * blockDim.x + threadIdx.x;\n"
         "  if (t < n) x[t] = x[t] * " +
         std::to_string(i) + ".0f + 1.0f;\n}\n";
}

void check_launch(int i) {
  cuda::Backend& be = cuda::backend();
  float host[4] = {1, 2, 3, 4};
  cuda::DevicePtr d = be.alloc(sizeof host);
  be.copy_to_device(d, host, sizeof host);
  int n = 4;
  void* params[] = {&d, &n};
  be.launch(jit::codegen::KernelHandle(kernel_name(i), kernel_source(i)).function(), {1, 1, 1},
            {32, 1, 1}, 0, nullptr, params);
  float out[4];
  be.copy_to_host(out, d, sizeof out);
  be.free(d);
  for (int k = 0; k < 4; ++k)
    if (out[k] != host[k] * static_cast<float>(i) + 1.0f) {
      std::fprintf(stderr, "kernel %d computed %g at %d\n", i, out[k], k);
      std::exit(1);
    }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "kernels" && argc >= 4) {
      int first = std::atoi(argv[2]), count = std::atoi(argv[3]);
      int repeat = argc > 4 ? std::atoi(argv[4]) : 1;
      for (int r = 0; r < repeat; ++r)
        for (int i = first; i < first + count; ++i)
          jit::codegen::KernelHandle(kernel_name(i), kernel_source(i)).function();
      check_launch(first);
    } else if (mode == "graph") {
      auto f = jit::compile([](const Tensor& x) { return softmax(relu(x * 2.0 + 1.0), -1) * x; });
      Tensor x = randn({4, 8}).to(Device::cuda());
      Tensor y = f(x);
      (void)y.to(Device::cpu());
    } else {
      std::fprintf(stderr, "usage: kiln_cache_worker kernels FIRST COUNT [REPEAT] | graph\n");
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln_cache_worker: %s\n", e.what());
    return 1;
  }
  const auto& s = jit::codegen::launch_stats();
  const auto& d = cache::disk_stats();
  std::printf("compiles=%lld disk_hits=%lld memory_hits=%lld stores=%lld healed=%lld\n",
              static_cast<long long>(s.compiles), static_cast<long long>(d.hits),
              static_cast<long long>(s.cache_hits), static_cast<long long>(d.stores),
              static_cast<long long>(d.healed));
  return 0;
}
