// Throughput of the virtual GPU: thread-instructions per second on an elementwise kernel and on
// a shared-memory block reduction, both compiled by NVRTC. Prints one line per kernel.
#include <dlfcn.h>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include <memory>

#include "runtime/cuda/backend.h"

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

}  // namespace

int main() {
  Device device = load_device();
  auto gpu = device.make();
  std::string ptx = compile(kSource);
  auto module = gpu->load_module(ptx);
  const int n = 1 << 22;
  std::vector<float> host(n, 1.0f);
  DevicePtr x = gpu->alloc(n * sizeof(float)), y = gpu->alloc(n * sizeof(float));
  gpu->copy_to_device(x, host.data(), n * sizeof(float));
  auto measure = [&](const char* name, Dim3 grid, void** params, const char* what) {
    auto fn = gpu->get_function(module, name);
    gpu->launch(fn, Dim3{1}, Dim3{256}, 0, nullptr, params);  // warm-up
    std::uint64_t before = device.instructions(*gpu);
    auto cpu = [] {  // this thread's CPU time: meaningful even when the cores are shared
      timespec ts;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
    };
    double c0 = cpu();
    auto t0 = std::chrono::steady_clock::now();
    gpu->launch(fn, grid, Dim3{256}, 0, nullptr, params);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double c = cpu() - c0;
    double instr = static_cast<double>(device.instructions(*gpu) - before);
    std::printf(
        "%-36s %10.0f thread-instructions: %6.1f M/s wall (%.2f s), %6.1f M/s per CPU "
        "second (%.2f s CPU)\n",
        what, instr, instr / s / 1e6, s, instr / c / 1e6, c);
  };
  float a = 2.0f, b = 1.0f;
  int count = n;
  void* p1[] = {&x, &y, &a, &b, &count};
  measure("axpb", Dim3{static_cast<unsigned>(n / 256)}, p1, "elementwise y = a*x + b (4M)");
  void* p2[] = {&x, &y, &count};
  measure("block_sum", Dim3{static_cast<unsigned>(n / 256)}, p2,
          "shared-memory block reduction (4M)");
  std::vector<float> out(2);
  gpu->copy_to_host(out.data(), y, 2 * sizeof(float));
  if (out[0] != 256.0f || out[1] != 256.0f) {
    std::fprintf(stderr, "bench_vgpu: wrong reduction result %f\n", out[0]);
    return 1;
  }
  gpu->free(x);
  gpu->free(y);
  gpu->unload_module(module);
  return 0;
}
