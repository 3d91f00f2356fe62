// What the virtual-GPU suites share: NVRTC compilation to PTX for compute_90 (through kiln's
// own wrapper), a Gpu that owns its allocations and launches kernels, and seeded host data.
#pragma once

#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cuda/backends.h"
#include "runtime/cuda/nvrtc/nvrtc.h"

namespace kiln::test {

using cuda::Backend;
using cuda::DevicePtr;
using cuda::Dim3;

// PTX for the virtual GPU; a compile error fails the test with NVRTC's log.
inline std::string compile(const std::string& src, std::vector<std::string> extra = {}) {
  nvrtc::ProgramOptions options;
  options.flags = {"-default-device", "-std=c++17"};
  options.flags.insert(options.flags.end(), extra.begin(), extra.end());
  try {
    return nvrtc::compile_program(src, "k.cu", nvrtc::Target::ptx(9, 0), options).ptx;
  } catch (const nvrtc::CompileError& e) {
    BOOST_FAIL(e.what() << "\n" << e.log());
  }
  return {};
}

struct Gpu {
  std::unique_ptr<Backend> b = cuda::make_virtual_backend();
  std::vector<DevicePtr> owned;
  ~Gpu() {
    for (auto p : owned) b->free(p);
  }
  template <class T>
  DevicePtr upload(const std::vector<T>& v) {
    DevicePtr p = b->alloc(v.size() * sizeof(T));
    b->copy_to_device(p, v.data(), v.size() * sizeof(T));
    owned.push_back(p);
    return p;
  }
  template <class T>
  DevicePtr zeros(std::size_t n) {
    return upload(std::vector<T>(n, T{}));
  }
  template <class T>
  std::vector<T> download(DevicePtr p, std::size_t n) {
    std::vector<T> v(n);
    b->copy_to_host(v.data(), p, n * sizeof(T));
    return v;
  }
  // Loads `ptx` and launches `name` with the given arguments.
  template <class... Args>
  void run(const std::string& ptx, const char* name, Dim3 grid, Dim3 block, unsigned shmem,
           Args... args) {
    auto m = b->load_module(ptx);
    auto f = b->get_function(m, name);
    void* params[] = {static_cast<void*>(&args)..., nullptr};
    b->launch(f, grid, block, shmem, nullptr, params);
    b->unload_module(m);
  }
};

// A small LCG: uniform floats in [-2, 2), the same on every platform.
inline float lcg_float(std::uint32_t& s) {
  s = s * 1664525u + 1013904223u;
  return static_cast<float>(s >> 8) / 16777216.0f * 4.0f - 2.0f;
}

inline std::vector<float> random_floats(std::size_t n, std::uint32_t seed = 1) {
  std::vector<float> v(n);
  for (auto& x : v) x = lcg_float(seed);
  return v;
}

// The message of what `f` throws, or "" when it returns: checks assert on the report's text.
inline std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

inline bool mentions(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace kiln::test
