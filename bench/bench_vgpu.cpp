// Throughput of the virtual GPU and the cost of its checks: an elementwise kernel and a
// shared-memory block reduction, both compiled by NVRTC, each timed plain, under racecheck,
// initcheck, both, the random schedule and the profiler. Prints one table row per kernel.
// KILN_BENCH_ELEMENTS sets the size (default 4M), KILN_BENCH_REPS the launches per mode (the
// best counts; default 5), KILN_BENCH_MODES picks modes by name ("profile", to run under
// cachegrind; plain always runs).
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
// (and, for initcheck, at each allocation: each mode has buffers of its own).
struct Mode {
  const char* name;
  const char* check;
  const char* schedule;
  bool profile = false;  // the profiler (KILN_PROFILE): its overhead is the last column
};
constexpr Mode kModes[] = {{"plain", "none", "in_order"},    {"race", "race", "in_order"},
                           {"init", "init", "in_order"},     {"race+init", "race,init", "in_order"},
                           {"random:1", "none", "random:1"}, {"profile", "none", "in_order", true}};

bool mode_selected(const Mode& m) {  // plain always runs: it is what the others divide by
  if (m.name == kModes[0].name) return true;
  const char* v = std::getenv("KILN_BENCH_MODES");
  if (!v || !*v) return true;
  std::string list = std::string(",") + v + ",";
  return list.find(std::string(",") + m.name + ",") != std::string::npos;
}

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
  const char* size = std::getenv("KILN_BENCH_ELEMENTS");
  const int n = size && *size ? std::max(256, std::atoi(size)) / 256 * 256 : 1 << 22;
  std::vector<float> host(n, 1.0f);
  struct Workload {
    const char* kernel;
    const char* what;
  };
  const Workload workloads[] = {{"axpb", "elementwise y = a*x + b"},
                                {"block_sum", "shared-memory block reduction"}};
  std::printf("%-36s %18s", "workload (CPU s, ratio to plain)", "thread-instr");
  for (const Mode& m : kModes)
    if (mode_selected(m)) std::printf(" %16s", m.name);
  std::printf("\n");
  const char* reps_env = std::getenv("KILN_BENCH_REPS");
  const int reps = reps_env && *reps_env ? std::max(1, std::atoi(reps_env)) : 5;
  std::vector<const Mode*> modes;
  for (const Mode& m : kModes)
    if (mode_selected(m)) modes.push_back(&m);
  auto enter = [](const Mode& m) {
    setenv("KILN_VGPU_CHECK", m.check, 1);
    setenv("KILN_VGPU_SCHEDULE", m.schedule, 1);
    kiln::cuda::vgpu::set_profiling(m.profile);
  };
  for (const Workload& w : workloads) {
    auto fn = gpu->get_function(module, w.kernel);
    std::printf("%-36s", (std::string(w.what) + " (" + std::to_string(n) + ")").c_str());
    // Each mode gets its own buffers, made under its checks, and a warm-up launch that pays for
    // their shadow memory.
    struct Run {
      DevicePtr x, y;
      double best = 1e30;
    };
    std::vector<Run> runs(modes.size());
    float a = 2.0f, b = 1.0f;
    int count = n;
    for (std::size_t i = 0; i < modes.size(); ++i) {
      enter(*modes[i]);
      Run& r = runs[i];
      r.x = gpu->alloc(n * sizeof(float)), r.y = gpu->alloc(n * sizeof(float));
      gpu->copy_to_device(r.x, host.data(), n * sizeof(float));
      void* p1[] = {&r.x, &r.y, &a, &b, &count};
      void* p2[] = {&r.x, &r.y, &count};
      gpu->launch(fn, Dim3{1}, Dim3{256}, 0, nullptr, w.kernel[0] == 'a' ? p1 : p2);
    }
    // The modes take turns, each keeping its best time: the cores may be shared, and a slow
    // spell then costs every mode alike rather than the one that ran during it.
    double instr = 0;
    for (int rep = 0; rep < reps; ++rep) {
      for (std::size_t i = 0; i < modes.size(); ++i) {
        enter(*modes[i]);
        Run& r = runs[i];
        void* p1[] = {&r.x, &r.y, &a, &b, &count};
        void* p2[] = {&r.x, &r.y, &count};
        std::uint64_t before = device.instructions(*gpu);
        double c0 = thread_cpu_seconds();
        gpu->launch(fn, Dim3{static_cast<unsigned>(n / 256)}, Dim3{256}, 0, nullptr,
                    w.kernel[0] == 'a' ? p1 : p2);
        r.best = std::min(r.best, thread_cpu_seconds() - c0);
        if (i == 0) instr = static_cast<double>(device.instructions(*gpu) - before);
        kiln::cuda::vgpu::clear_profiles();
      }
    }
    double plain = runs[0].best;
    std::printf(" %18.0f", instr);
    for (std::size_t i = 0; i < modes.size(); ++i)
      std::printf(" %8.2fs (%.2fx)", runs[i].best, runs[i].best / plain);
    std::printf("  %.1f M thread-instr/s plain\n", instr / plain / 1e6);
    for (Run& r : runs) {
      if (w.kernel[0] == 'b') {
        std::vector<float> out(2);
        gpu->copy_to_host(out.data(), r.y, 2 * sizeof(float));
        if (out[0] != 256.0f || out[1] != 256.0f) {
          std::fprintf(stderr, "bench_vgpu: wrong reduction result %f\n", out[0]);
          return 1;
        }
      }
      gpu->free(r.x);
      gpu->free(r.y);
    }
  }
  gpu->unload_module(module);
  return 0;
}
