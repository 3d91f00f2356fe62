// The CUDA backend interface: the slice of the driver API kiln uses, with two implementations,
// `driver` (libcuda.so.1 through dlopen) and `virtual` (a PTX interpreter on the host).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace kiln::cuda {

// A device address. On the virtual GPU it is a host address of a checked allocation.
using DevicePtr = std::uint64_t;

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct DeviceProperties {
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  int sm_count = 0;
  int warp_size = 32;
  int max_threads_per_block = 1024;
  Dim3 max_block_dim{1024, 1024, 64};
  Dim3 max_grid_dim{2147483647u, 65535u, 65535u};
  std::size_t shared_mem_per_block = 48 * 1024;         // without opt-in
  std::size_t shared_mem_per_block_optin = 227 * 1024;  // with cuFuncSetAttribute opt-in
  int registers_per_block = 65536;
  std::size_t total_memory = 0;
  bool is_virtual = false;
};

// Opaque handles owned by the backend that created them.
struct ModuleImpl;
struct FunctionImpl;
struct StreamImpl;
struct EventImpl;
struct GraphExecImpl;
using Module = ModuleImpl*;
using Function = FunctionImpl*;
using Stream = StreamImpl*;  // nullptr is the default (legacy) stream
using Event = EventImpl*;
using GraphExec = GraphExecImpl*;  // an instantiated CUDA graph (CUgraphExec)

// CUstreamCaptureMode: which calls a capture in progress forbids. Under `global` a capture on
// any thread, under `thread_local` one on this thread, makes calls that are unsafe while work is
// being recorded (allocation, synchronization, host copies) fail and invalidate it; `relaxed`
// allows them. Each thread has its own mode for the calls it makes (exchange_capture_mode).
enum class CaptureMode { global, thread_local_, relaxed };

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view kind() const = 0;  // "driver" or "virtual"
  virtual int device_count() = 0;
  virtual const DeviceProperties& properties(int device = 0) = 0;

  virtual DevicePtr alloc(std::size_t bytes) = 0;
  virtual void free(DevicePtr ptr) = 0;
  // From page-locked memory (host_alloc) the copy is queued and this returns at once; from
  // pageable memory it waits for all queued work, as cuMemcpyHtoD does (counted in host_sync.h).
  virtual void copy_to_device(DevicePtr dst, const void* src, std::size_t bytes,
                              Stream stream = nullptr) = 0;
  virtual void copy_to_host(void* dst, DevicePtr src, std::size_t bytes,
                            Stream stream = nullptr) = 0;
  virtual void copy_device(DevicePtr dst, DevicePtr src, std::size_t bytes,
                           Stream stream = nullptr) = 0;
  virtual void memset8(DevicePtr dst, std::uint8_t value, std::size_t bytes,
                       Stream stream = nullptr) = 0;

  // `image` is PTX text or a cubin; the driver JITs PTX, the virtual GPU only takes PTX.
  virtual Module load_module(std::string_view image) = 0;
  virtual void unload_module(Module module) = 0;
  virtual Function get_function(Module module, const std::string& name) = 0;
  // `params` is exactly what cuLaunchKernel takes: one pointer per kernel parameter.
  virtual void launch(Function fn, Dim3 grid, Dim3 block, unsigned dynamic_shared_bytes,
                      Stream stream, void** params) = 0;

  virtual Stream create_stream() = 0;
  virtual void destroy_stream(Stream stream) = 0;
  virtual void synchronize_stream(Stream stream) = 0;
  virtual Event create_event() = 0;
  virtual void destroy_event(Event event) = 0;
  virtual void record_event(Event event, Stream stream) = 0;
  virtual void wait_event(Stream stream, Event event) = 0;
  virtual void synchronize_event(Event event) = 0;
  virtual float elapsed_ms(Event start, Event end) = 0;
  virtual void synchronize() = 0;

  // Added last, so that the slots of the calls above keep their place in the vtable.
  // Page-locked host memory (cuMemHostAlloc): the only source an upload does not wait for.
  virtual void* host_alloc(std::size_t bytes) = 0;
  virtual void host_free(void* ptr) = 0;
  // cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES): lets `fn` launch with up to `bytes` of
  // dynamic shared memory; needed past 48 KiB in all (shared_memory_limits.h). Throws naming the
  // kernel when static + `bytes` exceeds the device's opt-in maximum.
  virtual void set_max_dynamic_shared(Function fn, unsigned bytes) = 0;
  // Whether the work queued before `event`'s last record has finished (cuEventQuery); never
  // waits. An event never recorded counts as finished.
  virtual bool event_done(Event event) = 0;

  // Stream capture (CUDA graphs). Work queued on `stream` while it captures is recorded, not
  // run; end_capture returns it instantiated (cuStreamEndCapture + cuGraphInstantiate), or
  // throws the error that invalidated the capture. The legacy stream cannot capture.
  virtual void begin_capture(Stream stream, CaptureMode mode) = 0;
  virtual GraphExec end_capture(Stream stream) = 0;
  virtual bool is_capturing(Stream stream) = 0;
  // cuThreadExchangeStreamCaptureMode: this thread's mode for unsafe calls; returns the old one.
  virtual CaptureMode exchange_capture_mode(CaptureMode mode) = 0;
  // Queues the recorded work on `stream` as one launch (cuGraphLaunch).
  virtual void launch_graph(GraphExec graph, Stream stream) = 0;
  virtual void destroy_graph(GraphExec graph) = 0;
};

// This thread's capture mode while it lives: the caching allocator takes memory for a graph's
// pool in relaxed mode, as PyTorch's does around cudaMalloc.
class CaptureModeGuard {
 public:
  CaptureModeGuard(Backend& backend, CaptureMode mode)
      : backend_(backend), previous_(backend.exchange_capture_mode(mode)) {}
  ~CaptureModeGuard() { backend_.exchange_capture_mode(previous_); }
  CaptureModeGuard(const CaptureModeGuard&) = delete;
  CaptureModeGuard& operator=(const CaptureModeGuard&) = delete;

 private:
  Backend& backend_;
  CaptureMode previous_;
};

// The process-wide backend chosen by KILN_CUDA=driver|virtual|auto (default auto).
Backend& backend();

}  // namespace kiln::cuda
