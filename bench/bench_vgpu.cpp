// Throughput of the virtual GPU and the cost of its checks: an elementwise kernel and a
// shared-memory block reduction, both compiled by NVRTC, each timed plain, under racecheck,
// initcheck, both, the random schedule and the profiler. Prints one table row per kernel.
#include <dlfcn.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include <memory>

#include "runtime/cuda/backend.h"
#include "runtime/cuda/virtual/profiler.h"

namespace {

using kiln::cuda::DevicePtr;
using kiln::cuda::Dim3;

// NVRTC is linked privately into kiln_device; reach its C API through the loaded library (the
// few declarations needed are spelled out so the benchmark needs no toolkit include path).
using Program = struct NvrtcProgramImpl*;
using CreateFn = int (*)(Program*, const char*, const char*, int, const char* const*,
                         const char* const*);
using CompileFn = int (*)(Program, int, const char* const*);
using SizeFn = int (*)(Program, std::size_t*);
using GetFn = int (*)(Program, char*);
using DestroyFn = int (*)(Program*);

std::string compile(const char* src) {
  void* h = dlopen("libnvrtc.so.13", RTLD_NOW);
  if (!h) h = dlopen("/usr/local/cuda/lib64/libnvrtc.so", RTLD_NOW);
  if (!h) {
    std::fprintf(stderr, "bench_vgpu: cannot load NVRTC\n");
    std::exit(1);
  }
  auto create = reinterpret_cast<CreateFn>(dlsym(h, "nvrtcCreateProgram"));
  auto comp = reinterpret_cast<CompileFn>(dlsym(h, "nvrtcCompileProgram"));
  auto size = reinterpret_cast<SizeFn>(dlsym(h, "nvrtcGetPTXSize"));
  auto get = reinterpret_cast<GetFn>(dlsym(h, "nvrtcGetPTX"));
  auto destroy = reinterpret_cast<DestroyFn>(dlsym(h, "nvrtcDestroyProgram"));
  Program p;
  create(&p, src, "bench.cu", 0, nullptr, nullptr);
  const char* opts[] = {"-arch=compute_90", "-default-device"};
  if (comp(p, 2, opts) != 0) {
    std::fprintf(stderr, "bench_vgpu: NVRTC failed\n");
    std::exit(1);
  }
  std::size_t n;
  size(p, &n);
  std::string ptx(n, '\0');
  get(p, ptx.data());
  destroy(&p);
  return ptx;
}

const char* kSource = R"(
extern "C" __global__ void axpb(const float* x, float* y, float a, float b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}
extern "C" __global__ void block_sum(const float* x, float* out, int n) {
  __shared__ float s[256];
  int i = blockIdx.x * 256 + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
})";

// The benchmark links only `kiln`, which does not carry kiln_device; the virtual GPU is taken
// from libkiln_device.so next to this executable (or on the loader's path).
struct Device {
  std::unique_ptr<kiln::cuda::Backend> (*make)() = nullptr;
  std::uint64_t (*instructions)(kiln::cuda::Backend&) = nullptr;
};

Device load_device() {
  std::string dir = "/proc/self/exe";
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  dir = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
  dir = dir.substr(0, dir.rfind('/') + 1);
  void* h = dlopen((dir + "libkiln_device.so").c_str(), RTLD_NOW);
  if (!h) h = dlopen("libkiln_device.so", RTLD_NOW);
  Device d;
  if (h) {
    d.make = reinterpret_cast<decltype(d.make)>(dlsym(h, "_ZN4kiln4cuda20make_virtual_backendEv"));
    d.instructions = reinterpret_cast<decltype(d.instructions)>(
        dlsym(h, "_ZN4kiln4cuda4vgpu28executed_thread_instructionsERNS0_7BackendE"));
  }
  if (!d.make || !d.instructions) {
    std::fprintf(stderr, "bench_vgpu: cannot load the virtual GPU from libkiln_device.so\n");
    std::exit(1);
  }
  return d;
}

// One row per workload: CPU seconds of one launch under each checking / scheduling mode and the
// ratio to the plain interpreter. Modes are set through the environment, read at each launch
// (and, for initcheck, at each allocation: buffers are made afresh per mode).
struct Mode {
  const char* name;
  const char* check;
  const char* schedule;
  bool profile = false;  // the profiler (KILN_PROFILE): its overhead is the last column
};
constexpr Mode kModes[] = {{"plain", "none", "in_order"},    {"race", "race", "in_order"},
                           {"init", "init", "in_order"},     {"race+init", "race,init", "in_order"},
                           {"random:1", "none", "random:1"}, {"profile", "none", "in_order", true}};

double thread_cpu_seconds() {  // meaningful even when the cores are shared
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

int main() {
  Device device = load_device();
  auto gpu = device.make();
  std::string ptx = compile(kSource);
  auto module = gpu->load_module(ptx);
  const int n = 1 << 22;
  std::vector<float> host(n, 1.0f);
  struct Workload {
    const char* kernel;
    const char* what;
  };
  const Workload workloads[] = {{"axpb", "elementwise y = a*x + b (4M)"},
                                {"block_sum", "shared-memory block reduction (4M)"}};
  std::printf("%-36s %18s", "workload (CPU s, ratio to plain)", "thread-instr");
  for (const Mode& m : kModes) std::printf(" %16s", m.name);
  std::printf("\n");
  for (const Workload& w : workloads) {
    auto fn = gpu->get_function(module, w.kernel);
    double plain = 0, instr = 0;
    std::printf("%-36s", w.what);
    for (const Mode& m : kModes) {
      setenv("KILN_VGPU_CHECK", m.check, 1);
      setenv("KILN_VGPU_SCHEDULE", m.schedule, 1);
      kiln::cuda::vgpu::set_profiling(m.profile);
      DevicePtr x = gpu->alloc(n * sizeof(float)), y = gpu->alloc(n * sizeof(float));
      gpu->copy_to_device(x, host.data(), n * sizeof(float));
      float a = 2.0f, b = 1.0f;
      int count = n;
      void* p1[] = {&x, &y, &a, &b, &count};
      void* p2[] = {&x, &y, &count};
      void** params = w.kernel[0] == 'a' ? p1 : p2;
      gpu->launch(fn, Dim3{1}, Dim3{256}, 0, nullptr, params);  // warm-up
      std::uint64_t before = device.instructions(*gpu);
      // The best of three: the cores may be shared. The first run also pays for the checks'
      // shadow memory of the fresh buffers.
      double c = 1e30;
      for (int rep = 0; rep < 3; ++rep) {
        double c0 = thread_cpu_seconds();
        gpu->launch(fn, Dim3{static_cast<unsigned>(n / 256)}, Dim3{256}, 0, nullptr, params);
        c = std::min(c, thread_cpu_seconds() - c0);
      }
      if (m.name == kModes[0].name) {
        plain = c;
        instr = static_cast<double>(device.instructions(*gpu) - before) / 3;
        std::printf(" %18.0f %8.2fs (1.00x)", instr, c);
      } else {
        std::printf(" %8.2fs (%.2fx)", c, c / plain);
      }
      std::fflush(stdout);
      if (w.kernel[0] == 'b') {
        std::vector<float> out(2);
        gpu->copy_to_host(out.data(), y, 2 * sizeof(float));
        if (out[0] != 256.0f || out[1] != 256.0f) {
          std::fprintf(stderr, "\nbench_vgpu: wrong reduction result %f\n", out[0]);
          return 1;
        }
      }
      gpu->free(x);
      gpu->free(y);
    }
    std::printf("  %.1f M thread-instr/s plain\n", instr / plain / 1e6);
  }
  gpu->unload_module(module);
  return 0;
}
