// The `driver` CUDA backend: kiln::cuda::Backend over the driver API (libcuda.so.1 via dlopen)
// on device 0's primary context.
#include <cuda.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

#include "runtime/cuda/backends.h"
#include "runtime/cuda/cuda_versions.h"
#include "runtime/cuda/driver/driver_api.h"
#include "runtime/cuda/driver/launch_timing.h"
#include "runtime/cuda/host_sync.h"
#include "runtime/cuda/launch_blocking.h"
#include "runtime/cuda/pinned_ranges.h"
#include "runtime/error.h"

namespace kiln::cuda {
namespace {

using driver::DriverApi;

// Handles are the driver's own handles cast to the opaque kiln types, except functions, which
// also remember the dynamic shared memory they were opted in to.
struct DriverFunction {
  CUfunction fn = nullptr;
  std::string name;
  int static_shared = 0;
  std::mutex mutex;
  int max_dynamic_shared = 0;  // the current CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
};

CUstream cu(Stream s) {
  return reinterpret_cast<CUstream>(s);
}
CUevent cu(Event e) {
  return reinterpret_cast<CUevent>(e);
}
CUmodule cu(Module m) {
  return reinterpret_cast<CUmodule>(m);
}
DriverFunction* cu(Function f) {
  return reinterpret_cast<DriverFunction*>(f);
}

class DriverBackend final : public Backend {
 public:
  DriverBackend() : api_(driver::driver_api()) {
    DriverVersionCheck version = check_driver_version(api_.driver_version, CUDA_VERSION);
    if (!version.error.empty()) throw Error(version.error);
    if (!version.warning.empty()) std::fprintf(stderr, "%s\n", version.warning.c_str());
    launch_blocking();  // a bad KILN_LAUNCH_BLOCKING fails here, before any kernel runs
    int count = 0;
    check(api_.device_get_count(&count), "cuDeviceGetCount");
    KILN_CHECK(count > 0, "the CUDA driver (version {}) reports no GPU", api_.driver_version);
    props_.resize(count);
    loaded_.resize(count);
    check(api_.device_get(&device_, 0), "cuDeviceGet(0)");
    check(api_.primary_ctx_retain(&ctx_, device_), "cuDevicePrimaryCtxRetain(device 0)");
    make_current();
  }

  ~DriverBackend() override {
    // Errors are ignored: at process exit the driver may already be deinitialized.
    for (auto* f : functions_) delete f;
    if (ctx_) api_.primary_ctx_release(device_);
  }

  std::string_view kind() const override { return "driver"; }
  int device_count() override { return static_cast<int>(props_.size()); }

  const DeviceProperties& properties(int device) override {
    KILN_CHECK(device >= 0 && device < device_count(),
               "properties({}): device out of range, the driver reports {} device(s)", device,
               device_count());
    std::lock_guard lock(mutex_);
    if (!loaded_[device]) {
      props_[device] = query_properties(device);
      loaded_[device] = true;
    }
    return props_[device];
  }

  DevicePtr alloc(std::size_t bytes) override {
    make_current();
    CUdeviceptr p = 0;
    check(api_.mem_alloc(&p, bytes == 0 ? 1 : bytes), "cuMemAlloc_v2",
          fmt::format("{} bytes", bytes));
    return p;
  }
  void free(DevicePtr ptr) override {
    if (!ptr) return;
    make_current();
    check(api_.mem_free(ptr), "cuMemFree_v2", fmt::format("{:#x}", ptr));
  }

  void copy_to_device(DevicePtr dst, const void* src, std::size_t bytes, Stream s) override {
    make_current();
    auto what = [&] { return fmt::format("{} bytes to {:#x}", bytes, dst); };
    bool pinned = pinned_.contains(src, bytes);
    if (!pinned) count_pageable_upload();
    if (s || pinned)  // from pinned memory, async on the null stream too: the host does not wait
      check(api_.memcpy_htod_async(dst, src, bytes, cu(s)), "cuMemcpyHtoDAsync_v2", what());
    else
      check(api_.memcpy_htod(dst, src, bytes), "cuMemcpyHtoD_v2", what());
  }
  void* host_alloc(std::size_t bytes) override {
    make_current();
    void* p = nullptr;
    check(api_.mem_host_alloc(&p, bytes == 0 ? 1 : bytes, 0), "cuMemHostAlloc",
          fmt::format("{} bytes", bytes));
    pinned_.add(p, bytes == 0 ? 1 : bytes);
    return p;
  }
  void host_free(void* ptr) override {
    if (!ptr) return;
    KILN_CHECK(pinned_.remove(ptr), "host_free({}): not a block from host_alloc", ptr);
    make_current();
    check(api_.mem_free_host(ptr), "cuMemFreeHost");
  }
  // The host buffer is filled when this returns, on any stream.
  void copy_to_host(void* dst, DevicePtr src, std::size_t bytes, Stream s) override {
    make_current();
    auto what = fmt::format("{} bytes from {:#x}", bytes, src);
    if (s) {
      check(api_.memcpy_dtoh_async(dst, src, bytes, cu(s)), "cuMemcpyDtoHAsync_v2", what);
      check(api_.stream_synchronize(cu(s)), "cuStreamSynchronize", "after cuMemcpyDtoHAsync_v2");
    } else {
      check(api_.memcpy_dtoh(dst, src, bytes), "cuMemcpyDtoH_v2", what);
    }
  }
  void copy_device(DevicePtr dst, DevicePtr src, std::size_t bytes, Stream s) override {
    make_current();
    auto what = fmt::format("{} bytes {:#x} -> {:#x}", bytes, src, dst);
    if (s)
      check(api_.memcpy_dtod_async(dst, src, bytes, cu(s)), "cuMemcpyDtoDAsync_v2", what);
    else
      check(api_.memcpy_dtod(dst, src, bytes), "cuMemcpyDtoD_v2", what);
  }
  void memset8(DevicePtr dst, std::uint8_t value, std::size_t bytes, Stream s) override {
    make_current();
    check(api_.memset_d8_async(dst, value, bytes, cu(s)), "cuMemsetD8Async",
          fmt::format("{} bytes at {:#x}", bytes, dst));
  }

  Module load_module(std::string_view image) override {
    make_current();
    std::string data(image);  // PTX must be NUL-terminated
    constexpr unsigned kLog = 16 * 1024;
    std::vector<char> info(kLog, '\0'), error(kLog, '\0');
    CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                           CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                           CU_JIT_LOG_VERBOSE};
    void* values[] = {info.data(), reinterpret_cast<void*>(static_cast<std::uintptr_t>(kLog)),
                      error.data(), reinterpret_cast<void*>(static_cast<std::uintptr_t>(kLog)),
                      reinterpret_cast<void*>(std::uintptr_t{1})};
    CUmodule module = nullptr;
    CUresult r = api_.module_load_data_ex(&module, data.c_str(), 5, opts, values);
    if (r != CUDA_SUCCESS) {
      throw Error(fmt::format(
          "cuModuleLoadDataEx ({} byte {} image) failed: {}\nJIT error log:\n{}", image.size(),
          image.starts_with("\x7f"
                            "ELF")
              ? "cubin"
              : "PTX",
          driver::error_text(api_, r), error.data()));
    }
    return reinterpret_cast<Module>(module);
  }
  void unload_module(Module module) override {
    if (!module) return;
    make_current();
    check(api_.module_unload(cu(module)), "cuModuleUnload");
  }
  Function get_function(Module module, const std::string& name) override {
    make_current();
    auto f = std::make_unique<DriverFunction>();
    f->name = name;
    check(api_.module_get_function(&f->fn, cu(module), name.c_str()), "cuModuleGetFunction",
          fmt::format("'{}'", name));
    check(api_.func_get_attribute(&f->static_shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f->fn),
          "cuFuncGetAttribute(SHARED_SIZE_BYTES)", name);
    check(api_.func_get_attribute(&f->max_dynamic_shared,
                                  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f->fn),
          "cuFuncGetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", name);
    std::lock_guard lock(mutex_);
    functions_.push_back(f.get());
    return reinterpret_cast<Function>(f.release());
  }

  // More than 48 KiB of shared memory needs this per-function opt-in (KernelHandle::launch makes
  // it once per kernel); a launch past the limit without it fails in cuLaunchKernel.
  void set_max_dynamic_shared(Function fn, unsigned bytes) override {
    make_current();
    auto* f = cu(fn);
    KILN_CHECK(f, "set_max_dynamic_shared: null function");
    std::lock_guard lock(f->mutex);
    if (static_cast<int>(bytes) <= f->max_dynamic_shared) return;
    check(api_.func_set_attribute(f->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  static_cast<int>(bytes)),
          "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
          fmt::format("'{}' to {} bytes (+{} static)", f->name, bytes, f->static_shared));
    f->max_dynamic_shared = static_cast<int>(bytes);
  }

  void launch(Function fn, Dim3 grid, Dim3 block, unsigned dynamic_shared_bytes, Stream stream,
              void** params) override {
    make_current();
    auto* f = cu(fn);
    KILN_CHECK(f, "launch: null function");
    // With launch timing on (driver/launch_timing.h), events on the launch's stream bracket it.
    driver::TimedLaunch timed;
    if (driver::launch_timing()) {
      timed.kernel = f->name;
      // Events made before a failing call are destroyed: timing must not leak them.
      CUresult e = api_.event_create(&timed.start, CU_EVENT_DEFAULT);
      if (e == CUDA_SUCCESS) e = api_.event_create(&timed.end, CU_EVENT_DEFAULT);
      if (e == CUDA_SUCCESS) e = api_.event_record(timed.start, cu(stream));
      if (e != CUDA_SUCCESS) {
        if (timed.start) api_.event_destroy(timed.start);
        if (timed.end) api_.event_destroy(timed.end);
        check(e, "cuEventCreate/cuEventRecord", "launch timing of '" + f->name + "'");
      }
    }
    CUresult r = api_.launch_kernel(f->fn, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                    dynamic_shared_bytes, cu(stream), params, nullptr);
    if (timed.start) {
      if (r == CUDA_SUCCESS) r = api_.event_record(timed.end, cu(stream));
      if (r == CUDA_SUCCESS) {
        driver::add_timed_launch(std::move(timed));
      } else {
        api_.event_destroy(timed.start);
        api_.event_destroy(timed.end);
      }
    }
    auto what = [&] { return launch_text(f->name, grid, block, dynamic_shared_bytes); };
    if (r != CUDA_SUCCESS) check(r, "cuLaunchKernel", what());
    if (launch_blocking()) {
      // A fault surfaces at the next call that waits: wait here, so it names this kernel.
      count_synchronization();
      CUresult done = api_.ctx_synchronize();
      if (done != CUDA_SUCCESS)
        throw Error(
            blocking_launch_failure(what(), "cuCtxSynchronize", driver::error_text(api_, done)));
    }
  }

  Stream create_stream() override {
    make_current();
    CUstream s = nullptr;
    check(api_.stream_create(&s, CU_STREAM_DEFAULT), "cuStreamCreate");
    return reinterpret_cast<Stream>(s);
  }
  void destroy_stream(Stream s) override {
    if (!s) return;
    make_current();
    check(api_.stream_destroy(cu(s)), "cuStreamDestroy_v2");
  }
  void synchronize_stream(Stream s) override {
    make_current();
    check(api_.stream_synchronize(cu(s)), "cuStreamSynchronize");
  }
  Event create_event() override {
    make_current();
    CUevent e = nullptr;
    check(api_.event_create(&e, CU_EVENT_DEFAULT), "cuEventCreate");
    return reinterpret_cast<Event>(e);
  }
  void destroy_event(Event e) override {
    if (!e) return;
    make_current();
    check(api_.event_destroy(cu(e)), "cuEventDestroy_v2");
  }
  void record_event(Event e, Stream s) override {
    make_current();
    check(api_.event_record(cu(e), cu(s)), "cuEventRecord");
  }
  void wait_event(Stream s, Event e) override {
    make_current();
    check(api_.stream_wait_event(cu(s), cu(e), 0), "cuStreamWaitEvent");
  }
  void synchronize_event(Event e) override {
    make_current();
    check(api_.event_synchronize(cu(e)), "cuEventSynchronize");
  }
  bool event_done(Event e) override {
    make_current();
    CUresult r = api_.event_query(cu(e));
    if (r == CUDA_ERROR_NOT_READY) return false;
    check(r, "cuEventQuery");
    return true;
  }
  float elapsed_ms(Event start, Event end) override {
    make_current();
    float ms = 0;
    check(api_.event_elapsed_time(&ms, cu(start), cu(end)), "cuEventElapsedTime");
    return ms;
  }
  void synchronize() override {
    make_current();
    check(api_.ctx_synchronize(), "cuCtxSynchronize");
  }

  void begin_capture(Stream s, CaptureMode mode) override {
    make_current();
    KILN_CHECK(s != nullptr, "cuStreamBeginCapture: the legacy stream cannot capture");
    check(api_.stream_begin_capture(cu(s), cu_mode(mode)), "cuStreamBeginCapture_v2");
  }
  GraphExec end_capture(Stream s) override {
    make_current();
    CUgraph graph = nullptr;
    check(api_.stream_end_capture(cu(s), &graph), "cuStreamEndCapture");
    CUgraphExec exec = nullptr;
    CUresult r = api_.graph_instantiate(&exec, graph, 0);
    api_.graph_destroy(graph);  // the executable graph keeps what it needs
    check(r, "cuGraphInstantiateWithFlags");
    return reinterpret_cast<GraphExec>(exec);
  }
  bool is_capturing(Stream s) override {
    make_current();
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    check(api_.stream_is_capturing(cu(s), &status), "cuStreamIsCapturing");
    return status != CU_STREAM_CAPTURE_STATUS_NONE;
  }
  CaptureMode exchange_capture_mode(CaptureMode mode) override {
    make_current();
    CUstreamCaptureMode m = cu_mode(mode);
    check(api_.thread_exchange_capture_mode(&m), "cuThreadExchangeStreamCaptureMode");
    return m == CU_STREAM_CAPTURE_MODE_GLOBAL         ? CaptureMode::global
           : m == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ? CaptureMode::thread_local_
                                                      : CaptureMode::relaxed;
  }
  void launch_graph(GraphExec g, Stream s) override {
    make_current();
    check(api_.graph_launch(reinterpret_cast<CUgraphExec>(g), cu(s)), "cuGraphLaunch");
  }
  void destroy_graph(GraphExec g) override {
    make_current();
    check(api_.graph_exec_destroy(reinterpret_cast<CUgraphExec>(g)), "cuGraphExecDestroy");
  }

 private:
  static CUstreamCaptureMode cu_mode(CaptureMode mode) {
    switch (mode) {
      case CaptureMode::global:
        return CU_STREAM_CAPTURE_MODE_GLOBAL;
      case CaptureMode::thread_local_:
        return CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
      case CaptureMode::relaxed:
        return CU_STREAM_CAPTURE_MODE_RELAXED;
    }
    return CU_STREAM_CAPTURE_MODE_GLOBAL;
  }

  void check(CUresult r, std::string_view call, std::string_view what = {}) const {
    if (r == CUDA_SUCCESS) [[likely]]
      return;
    throw Error(fmt::format("{}{}{}{} failed: {}", call, what.empty() ? "" : "(", what,
                            what.empty() ? "" : ")", driver::error_text(api_, r)));
  }

  // The driver's current context is per thread; set ours on each thread that calls in.
  void make_current() {
    thread_local CUcontext current = nullptr;
    if (current != ctx_) {
      check(api_.ctx_set_current(ctx_), "cuCtxSetCurrent");
      current = ctx_;
    }
  }

  DeviceProperties query_properties(int ordinal) {
    CUdevice dev = 0;
    check(api_.device_get(&dev, ordinal), "cuDeviceGet", fmt::format("{}", ordinal));
    auto attr = [&](CUdevice_attribute a, const char* name) {
      int v = 0;
      check(api_.device_get_attribute(&v, a, dev), "cuDeviceGetAttribute", name);
      return v;
    };
    DeviceProperties p;
    char name[256] = {};
    check(api_.device_get_name(name, sizeof(name), dev), "cuDeviceGetName");
    p.name = name;
    p.compute_major =
        attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "COMPUTE_CAPABILITY_MAJOR");
    p.compute_minor =
        attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "COMPUTE_CAPABILITY_MINOR");
    p.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "MULTIPROCESSOR_COUNT");
    p.warp_size = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE, "WARP_SIZE");
    p.max_threads_per_block =
        attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "MAX_THREADS_PER_BLOCK");
    auto u = [](int v) { return static_cast<unsigned>(v); };
    p.max_block_dim = {u(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, "MAX_BLOCK_DIM_X")),
                       u(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, "MAX_BLOCK_DIM_Y")),
                       u(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, "MAX_BLOCK_DIM_Z"))};
    p.max_grid_dim = {u(attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, "MAX_GRID_DIM_X")),
                      u(attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, "MAX_GRID_DIM_Y")),
                      u(attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, "MAX_GRID_DIM_Z"))};
    p.shared_mem_per_block = static_cast<std::size_t>(
        attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, "MAX_SHARED_MEMORY_PER_BLOCK"));
    p.shared_mem_per_block_optin =
        static_cast<std::size_t>(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                      "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"));
    p.registers_per_block =
        attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, "MAX_REGISTERS_PER_BLOCK");
    std::size_t total = 0;
    check(api_.device_total_mem(&total, dev), "cuDeviceTotalMem_v2");
    p.total_memory = total;
    p.is_virtual = false;
    return p;
  }

  const DriverApi& api_;
  CUdevice device_ = 0;
  CUcontext ctx_ = nullptr;
  std::mutex mutex_;
  std::vector<DeviceProperties> props_;
  std::vector<bool> loaded_;
  std::vector<DriverFunction*> functions_;  // owned; freed with the backend
  PinnedRanges pinned_;
};

}  // namespace

std::unique_ptr<Backend> make_driver_backend() {
  return std::make_unique<DriverBackend>();
}

}  // namespace kiln::cuda
