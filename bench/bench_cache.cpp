// The kernel cache's costs: per kernel, the median of a cold compile (NVRTC + store + module
// load), a disk hit (read + checksum + module load) and a memory hit; then, per process, the
// time from process start to the first result of the compiled MLP forward on CUDA with a cold
// disk cache versus a warm one, and the NVRTC compiles each paid. Uses its own cache
// directories under /tmp. Targets: a disk hit <= 1 ms per kernel; a warm start compiles nothing.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "cache/disk_cache.h"
#include "cache/kernel_store.h"
#include "jit/codegen/codegen_version.h"
#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/launch_stats.h"
#include "jit/compile.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

double ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string source_of(int i) {
  return "// k_bench_" + std::to_string(i) +
         ": gelu of x + bias, a benchmark kernel\nextern \"C\" __global__ void k_bench_" +
         std::to_string(i) +
         "(const float* x, const float* b, float* y, int n, int cols) {\n"
         "  int t = blockIdx.x * blockDim.x + threadIdx.x;\n  if (t >= n) return;\n"
         "  float v = x[t] + b[t % cols] * " +
         std::to_string(i) +
         ".0f;\n"
         "  y[t] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));\n}\n";
}

fs::path fresh_dir(const char* tag) {
  std::string tmpl = std::string("/tmp/kiln_bench_") + tag + "_XXXXXX";
  return mkdtemp(tmpl.data());
}

// The MLP forward, compiled, on CUDA; prints the ms from process start to its first result.
int mlp_child() {
  auto start = Clock::now();
  Generator init(42);
  nn::Linear fc1(2, 64, true, DType::f32, &init);
  nn::Linear fc2(64, 4, true, DType::f32, &init);
  fc1.to(Device::cuda());
  fc2.to(Device::cuda());
  jit::CompileOptions options;
  options.name = "mlp";
  options.modules = {&fc1, &fc2};
  auto model =
      jit::compile([&](const Tensor& x) { return softmax(fc2(gelu(fc1(x))), -1); }, options);
  Tensor y = model(randn({32, 2}).to(Device::cuda())).to(Device::cpu());
  std::printf("%.3f %lld\n", ms(start, Clock::now()),
              static_cast<long long>(jit::codegen::launch_stats().compiles.load()));
  return 0;
}

struct ChildRun {
  double total_ms = 0;  // fork to exit, as the parent sees it
  double first_ms = 0;  // the child's own main() to first result
  long long compiles = 0;
};

ChildRun run_child(const char* self, const fs::path& dir) {
  auto start = Clock::now();
  std::string cmd = "KILN_CACHE_DIR=" + dir.string() + " " + self + " mlp";
  FILE* p = popen(cmd.c_str(), "r");
  ChildRun r;
  if (fscanf(p, "%lf %lld", &r.first_ms, &r.compiles) != 2) r.first_ms = -1;
  pclose(p);
  r.total_ms = ms(start, Clock::now());
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "mlp") return mlp_child();
  const int kernels = 8;
  fs::path dir = fresh_dir("kernels");
  setenv("KILN_CACHE_DIR", dir.c_str(), 1);
  cache::reset_process_disk_cache();
  cuda::Backend& be = cuda::backend();
  auto target = nvrtc::Target::for_device(be.properties(0));
  auto request = [&](const std::string& name, const std::string& src) {
    return cache::KernelRequest{name, src, target, {}, jit::codegen::kCodegenVersion};
  };
  // Warm NVRTC itself up (its first compile loads its builtins).
  cache::fetch_or_compile(request("k_bench_w", source_of(999)));

  std::vector<double> cold, disk, memory;
  std::vector<std::string> names, sources;
  for (int i = 0; i < kernels; ++i) {
    names.push_back("k_bench_" + std::to_string(i));
    sources.push_back(source_of(i));
    auto t0 = Clock::now();
    auto image = cache::fetch_or_compile(request(names[i], sources[i]));
    be.get_function(be.load_module(image.image), names[i]);
    cold.push_back(ms(t0, Clock::now()));
  }
  for (int rep = 0; rep < 5; ++rep)
    for (int i = 0; i < kernels; ++i) {
      auto t0 = Clock::now();
      auto image = cache::fetch_or_compile(request(names[i], sources[i]));
      be.get_function(be.load_module(image.image), names[i]);
      disk.push_back(ms(t0, Clock::now()));
      if (image.compiled) std::fprintf(stderr, "bench_cache: a disk lookup compiled\n");
    }
  // A memory hit: a new handle of a kernel this process loaded finds it by its code.
  for (int i = 0; i < kernels; ++i) jit::codegen::KernelHandle(names[i], sources[i]).function();
  for (int rep = 0; rep < 100; ++rep)
    for (int i = 0; i < kernels; ++i) {
      jit::codegen::KernelHandle handle(names[i], sources[i]);
      auto t0 = Clock::now();
      handle.function();
      memory.push_back(ms(t0, Clock::now()));
    }

  std::printf("kernel cache, %d small kernels (%s, %s backend)\n", kernels, target.arch().c_str(),
              std::string(be.kind()).c_str());
  std::printf("  %-44s %10s\n", "per kernel", "median ms");
  std::printf("  %-44s %10.3f\n", "cold: NVRTC compile + store + module load", median(cold));
  std::printf("  %-44s %10.3f\n", "disk hit: read + checksum + module load", median(disk));
  std::printf("  %-44s %10.5f\n", "memory hit", median(memory));

  std::vector<double> cold_first, cold_total, warm_first, warm_total;
  long long cold_compiles = 0, warm_compiles = 0;
  fs::path warm_dir = fresh_dir("mlp_warm");
  run_child(argv[0], warm_dir);  // fills it
  for (int rep = 0; rep < 3; ++rep) {
    fs::path cold_dir = fresh_dir("mlp_cold");
    ChildRun c = run_child(argv[0], cold_dir);
    fs::remove_all(cold_dir);
    cold_first.push_back(c.first_ms);
    cold_total.push_back(c.total_ms);
    cold_compiles = c.compiles;
    ChildRun w = run_child(argv[0], warm_dir);
    warm_first.push_back(w.first_ms);
    warm_total.push_back(w.total_ms);
    warm_compiles = w.compiles;
  }
  std::printf(
      "\ncompiled MLP forward (2 -> 64 -> 4, gelu, softmax), one process per run, 3 runs\n");
  std::printf("  %-12s %22s %22s %16s\n", "disk cache", "main() to result, ms", "process wall, ms",
              "NVRTC compiles");
  std::printf("  %-12s %22.1f %22.1f %16lld\n", "cold", median(cold_first), median(cold_total),
              cold_compiles);
  std::printf("  %-12s %22.1f %22.1f %16lld\n", "warm", median(warm_first), median(warm_total),
              warm_compiles);
  fs::remove_all(warm_dir);
  fs::remove_all(dir);
  return 0;
}
