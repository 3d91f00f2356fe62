// The virtual GPU as a kiln::cuda::Backend: checked host memory, PTX modules decoded once at
// load, launches run to completion by the interpreter (streams and events are synchronous).
#include "runtime/cuda/virtual/virtual_backend.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "runtime/cuda/backends.h"
#include "runtime/cuda/host_sync.h"
#include "runtime/cuda/launch_blocking.h"
#include "runtime/cuda/pinned_ranges.h"
#include "runtime/cuda/shared_memory_limits.h"
#include "runtime/cuda/virtual/decoder.h"
#include "runtime/cuda/virtual/fault.h"
#include "runtime/cuda/virtual/launch.h"
#include "runtime/cuda/virtual/launch_limits.h"
#include "runtime/cuda/virtual/memory.h"
#include "runtime/cuda/virtual/program.h"
#include "runtime/cuda/virtual/shared_check.h"
#include "runtime/cuda/virtual/stream_capture.h"

namespace kiln::cuda {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool>& kernel_execution() {
  static std::atomic<bool> on{true};
  return on;
}

// Handle types of this backend; the public handles are these pointers cast.
struct VModule;
struct VFunction {
  VModule* module = nullptr;
  const vgpu::Function* fn = nullptr;
  // MAX_DYNAMIC_SHARED_SIZE_BYTES: set by set_max_dynamic_shared; before, 48 KiB less static.
  std::uint64_t max_dynamic_shared = 0;
  bool opted_in = false;
};
struct VModule {
  vgpu::Program program;
  std::vector<std::unique_ptr<VFunction>> functions;
};
struct VStream {};
struct VGraph {
  std::vector<vgpu::GraphNode> nodes;
};
struct VEvent {
  bool recorded = false;
  bool pending = false;  // recorded while events were held (vgpu::hold_events)
  Clock::time_point when;
};

std::atomic<bool>& events_held() {
  static std::atomic<bool> held{false};
  return held;
}

vgpu::FaultMode fault_mode_from_env() {
  const char* v = std::getenv("KILN_VGPU_FAULTS");
  if (v == nullptr || std::string_view(v).empty() || std::string_view(v) == "immediate")
    return vgpu::FaultMode::immediate;
  KILN_CHECK(std::string_view(v) == "late", "KILN_VGPU_FAULTS='{}': expected immediate or late", v);
  return vgpu::FaultMode::late;
}

// The CUresult a real GPU reports for the interpreter's fault (its message's first words).
std::string driver_error_of(std::string_view fault) {
  if (fault.starts_with("misaligned")) return "CUDA_ERROR_MISALIGNED_ADDRESS (misaligned address)";
  if (fault.starts_with("trap") || fault.starts_with("deadlock"))
    return "CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure)";
  return "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)";
}

class VirtualBackend final : public Backend {
 public:
  VirtualBackend() {
    props_.name = "kiln virtual GPU (PTX interpreter, sm_90)";
    props_.compute_major = 9;
    props_.compute_minor = 0;
    props_.sm_count = 132;
    props_.warp_size = 32;
    props_.max_threads_per_block = 1024;
    props_.max_block_dim = Dim3{1024, 1024, 64};
    props_.max_grid_dim = Dim3{2147483647u, 65535u, 65535u};
    props_.shared_mem_per_block = 48 * 1024;
    props_.shared_mem_per_block_optin = shared_memory_optin_limit(9, 0);
    props_.registers_per_block = 65536;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    props_.total_memory = pages > 0 && page > 0
                              ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)
                              : (std::size_t(16) << 30);
    props_.is_virtual = true;
    fault_mode_ = fault_mode_from_env();
    launch_blocking();  // a bad KILN_LAUNCH_BLOCKING fails here, before any kernel runs
  }
  ~VirtualBackend() override {
    for (VModule* m : modules_) delete m;
    for (VStream* s : streams_) delete s;
    for (VEvent* e : events_) delete e;
    for (VGraph* g : graphs_) delete g;
  }

  std::string_view kind() const override { return "virtual"; }
  int device_count() override { return 1; }
  const DeviceProperties& properties(int device) override {
    KILN_CHECK(device == 0, "virtual GPU: device {} does not exist (there is 1 device)", device);
    return props_;
  }

  DevicePtr alloc(std::size_t bytes) override {
    std::lock_guard lock(mu_);
    check_sticky("cuMemAlloc_v2");
    capture_.check_safe("cuMemAlloc_v2", "an allocation outside the graph's memory pool");
    // initcheck needs to know now: the bytes of a fresh allocation start uninitialized.
    bool track = false;
    try {
      track = vgpu::checks_from_env().init;
    } catch (const Error&) {  // a bad KILN_VGPU_CHECK is reported by the next launch
    }
    return mem_.alloc(bytes, {}, track);
  }
  void free(DevicePtr ptr) override {
    std::lock_guard lock(mu_);
    capture_.check_safe("cuMemFree_v2", "a free, which waits for the device");
    mem_.free(ptr);
  }
  void copy_to_device(DevicePtr dst, const void* src, std::size_t bytes, Stream s) override {
    std::lock_guard lock(mu_);
    check_stream(s, "copy_to_device");
    if (capture_.captures(s))
      capture_.refuse("cuMemcpyHtoDAsync_v2",
                      "a copy from the host (a graph replays device work only)");
    // From pageable memory the copy waits for the device, as cuMemcpyHtoD does.
    if (pinned_.contains(src, bytes)) {
      check_sticky("cuMemcpyHtoDAsync_v2");
    } else {
      capture_.check_safe("cuMemcpyHtoD_v2", "a copy from pageable host memory, which waits");
      report_fault("cuMemcpyHtoD_v2");
    }
    if (!bytes) return;
    KILN_CHECK(src != nullptr, "virtual GPU: copy_to_device of {} bytes from a null host pointer",
               bytes);
    mem_.check_range(dst, bytes, "copy_to_device destination");
    // As on the driver: a copy from pageable memory waits for all queued work.
    if (!pinned_.contains(src, bytes)) count_pageable_upload();
    std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
    mem_.mark_initialized(dst, bytes);
  }
  void* host_alloc(std::size_t bytes) override {
    std::size_t size = std::max<std::size_t>(bytes, 1);
    void* p = std::aligned_alloc(256, (size + 255) / 256 * 256);
    KILN_CHECK(p != nullptr, "virtual GPU: host_alloc of {} bytes failed", bytes);
    pinned_.add(p, size);
    return p;
  }
  void host_free(void* ptr) override {
    if (!ptr) return;
    KILN_CHECK(pinned_.remove(ptr), "virtual GPU: host_free({}): not a block from host_alloc", ptr);
    std::free(ptr);
  }
  void copy_to_host(void* dst, DevicePtr src, std::size_t bytes, Stream s) override {
    std::lock_guard lock(mu_);
    check_stream(s, "copy_to_host");
    if (capture_.captures(s))
      capture_.refuse("cuMemcpyDtoHAsync_v2",
                      "a copy to the host (a graph replays device work only)");
    capture_.check_safe("cuMemcpyDtoH_v2", "a copy to the host, which waits for the device");
    report_fault("cuMemcpyDtoH_v2");
    if (!bytes) return;
    KILN_CHECK(dst != nullptr, "virtual GPU: copy_to_host of {} bytes to a null host pointer",
               bytes);
    mem_.check_range(src, bytes, "copy_to_host source");
    std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  }
  void copy_device(DevicePtr dst, DevicePtr src, std::size_t bytes, Stream s) override {
    std::lock_guard lock(mu_);
    check_stream(s, "copy_device");
    check_sticky("cuMemcpyDtoD_v2");
    if (!bytes) return;
    mem_.check_range(src, bytes, "copy_device source");
    mem_.check_range(dst, bytes, "copy_device destination");
    if (capture_.captures(s))
      return record_memory_node(vgpu::GraphNode::Kind::copy, dst, src, 0, bytes);
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
    mem_.mark_initialized(dst, bytes);
  }
  void memset8(DevicePtr dst, std::uint8_t value, std::size_t bytes, Stream s) override {
    std::lock_guard lock(mu_);
    check_stream(s, "memset8");
    check_sticky("cuMemsetD8Async");
    if (!bytes) return;
    mem_.check_range(dst, bytes, "memset8 destination");
    if (capture_.captures(s))
      return record_memory_node(vgpu::GraphNode::Kind::memset, dst, 0, value, bytes);
    std::memset(reinterpret_cast<void*>(dst), value, bytes);
    mem_.mark_initialized(dst, bytes);
  }

  Module load_module(std::string_view image) override {
    std::lock_guard lock(mu_);
    check_sticky("cuModuleLoadDataEx");
    std::string text(image);
    KILN_CHECK_AS(
        PtxError,
        text.find(".version") != std::string::npos && text.find(".target") != std::string::npos,
        "virtual GPU: load_module needs PTX text (with .version and .target); a cubin "
        "or other binary image cannot be interpreted");
    auto module = std::make_unique<VModule>();
    std::vector<DevicePtr> globals;
    try {
      vgpu::ast::Module ast = vgpu::ast::parse_ptx(text);
      module->program = vgpu::decode_module(ast, [&](std::uint64_t size, const std::string& name) {
        DevicePtr p = mem_.alloc(size, name);
        globals.push_back(p);
        return p;
      });
    } catch (...) {
      for (DevicePtr p : globals) mem_.free(p);
      throw;
    }
    for (auto& f : module->program.functions) {
      if (!f->is_entry) continue;
      auto vf = std::make_unique<VFunction>();
      vf->module = module.get();
      vf->fn = f.get();
      functions_.insert(vf.get());
      module->functions.push_back(std::move(vf));
    }
    VModule* m = module.release();
    modules_.insert(m);
    return reinterpret_cast<Module>(m);
  }

  void unload_module(Module handle) override {
    std::lock_guard lock(mu_);
    VModule* m = module_of(handle, "unload_module");
    for (auto& f : m->functions) functions_.erase(f.get());
    for (const auto& g : m->program.globals) mem_.free(g.address);
    modules_.erase(m);
    delete m;
  }

  Function get_function(Module handle, const std::string& name) override {
    std::lock_guard lock(mu_);
    VModule* m = module_of(handle, "get_function");
    std::string names;
    for (auto& f : m->functions) {
      if (f->fn->name == name) return reinterpret_cast<Function>(f.get());
      names += (names.empty() ? "" : ", ") + f->fn->name;
    }
    throw Error(fmt::format("virtual GPU: module has no kernel named '{}' (kernels: {})", name,
                            names.empty() ? "none" : names));
  }

  void set_max_dynamic_shared(Function handle, unsigned bytes) override {
    std::lock_guard lock(mu_);
    auto* vf = reinterpret_cast<VFunction*>(handle);
    KILN_CHECK_AS(LaunchError, functions_.count(vf),
                  "virtual GPU: set_max_dynamic_shared of an invalid function handle");
    const vgpu::Function& k = *vf->fn;
    KILN_CHECK_AS(LaunchError, k.static_shared_bytes + bytes <= props_.shared_mem_per_block_optin,
                  "virtual GPU ({}): cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) of kernel "
                  "'{}' to {} bytes: with its {} static bytes, more than the {} a block may have "
                  "on sm_{}{}",
                  props_.name, k.name, bytes, k.static_shared_bytes,
                  props_.shared_mem_per_block_optin, props_.compute_major, props_.compute_minor);
    vf->max_dynamic_shared = bytes;
    vf->opted_in = true;
  }

  void set_compute_capability(int major, int minor) {
    std::lock_guard lock(mu_);
    props_.compute_major = major;
    props_.compute_minor = minor;
    props_.shared_mem_per_block_optin = shared_memory_optin_limit(major, minor);
    props_.name = fmt::format("kiln virtual GPU (PTX interpreter, sm_{}{})", major, minor);
  }
  void set_sm_count(int sm_count) {
    std::lock_guard lock(mu_);
    KILN_CHECK(sm_count > 0, "virtual GPU: set_sm_count({}): needs at least 1 SM", sm_count);
    props_.sm_count = sm_count;
  }
  void set_shared_memory_optin(std::size_t bytes) {
    std::lock_guard lock(mu_);
    KILN_CHECK(bytes >= props_.shared_mem_per_block,
               "virtual GPU: set_shared_memory_optin({}): less than the {} bytes every block may "
               "have",
               bytes, props_.shared_mem_per_block);
    props_.shared_mem_per_block_optin = bytes;
  }

  void launch(Function handle, Dim3 grid, Dim3 block, unsigned dynamic_shared, Stream s,
              void** params) override {
    std::lock_guard lock(mu_);
    auto* vf = reinterpret_cast<VFunction*>(handle);
    KILN_CHECK_AS(LaunchError, functions_.count(vf),
                  "virtual GPU: launch of an invalid function handle (unknown or its module was "
                  "unloaded)");
    check_stream(s, "launch");
    check_sticky("cuLaunchKernel");
    vgpu::validate_launch(props_, *vf->fn, vf->opted_in, vf->max_dynamic_shared, grid, block,
                          dynamic_shared);
    if (capture_.captures(s)) {
      // As the driver backend waits after each launch (cuCtxSynchronize), which capture forbids.
      if (launch_blocking())
        capture_.check_safe("cuCtxSynchronize", "KILN_LAUNCH_BLOCKING's wait after a launch");
      return record_launch(handle, grid, block, dynamic_shared, params);
    }
    execute(*vf, grid, block, dynamic_shared, params);
  }

  // Runs a validated launch; the caller holds the lock.
  void execute(const VFunction& vf_ref, Dim3 grid, Dim3 block, unsigned dynamic_shared,
               void** params) {
    const VFunction* vf = &vf_ref;
    const vgpu::Function& k = *vf->fn;
    vgpu::LaunchRequest rq;
    rq.program = &vf->module->program;
    rq.kernel = &k;
    rq.memory = &mem_;
    rq.grid = grid;
    rq.block = block;
    rq.dynamic_shared = dynamic_shared;
    rq.params = params;
    rq.sm_count = props_.sm_count;
    if (!kernel_execution().load(std::memory_order_relaxed)) return;
    const bool blocking = launch_blocking();
    if (blocking) count_synchronization();
    if (!fault_.empty()) {  // the device stopped at an earlier fault: this never runs
      if (blocking) report_fault("cuCtxSynchronize");
      return;
    }
    try {
      instructions_ += vgpu::run_launch(rq).thread_instructions;
    } catch (const KernelFault& e) {
      if (fault_mode_ == vgpu::FaultMode::late) {
        fault_ = driver_error_of(e.what());
        if (!blocking) return;  // reported by the next call that waits
        fault_reported_ = true;
      }
      if (!blocking) throw;
      throw KernelFault(blocking_launch_failure(
          launch_text(k.name, grid, block, dynamic_shared), "cuCtxSynchronize",
          fmt::format("{}: {}", driver_error_of(e.what()), e.what())));
    }
  }

  Stream create_stream() override {
    std::lock_guard lock(mu_);
    auto* s = new VStream;
    streams_.insert(s);
    return reinterpret_cast<Stream>(s);
  }
  void destroy_stream(Stream s) override {
    std::lock_guard lock(mu_);
    KILN_CHECK(s != nullptr, "virtual GPU: destroy_stream of the default stream");
    check_stream(s, "destroy_stream");
    auto* vs = reinterpret_cast<VStream*>(s);
    streams_.erase(vs);
    delete vs;
  }
  void synchronize_stream(Stream s) override {
    std::lock_guard lock(mu_);
    check_stream(s, "synchronize_stream");
    capture_.check_safe("cuStreamSynchronize", "a synchronization");
    report_fault("cuStreamSynchronize");
    complete_events();
  }
  Event create_event() override {
    std::lock_guard lock(mu_);
    auto* e = new VEvent;
    events_.insert(e);
    return reinterpret_cast<Event>(e);
  }
  void destroy_event(Event e) override {
    std::lock_guard lock(mu_);
    VEvent* ve = event_of(e, "destroy_event");
    events_.erase(ve);
    delete ve;
  }
  void record_event(Event e, Stream s) override {
    std::lock_guard lock(mu_);
    VEvent* ve = event_of(e, "record_event");
    check_stream(s, "record_event");
    check_sticky("cuEventRecord");
    ve->recorded = true;
    ve->pending = events_held().load(std::memory_order_relaxed);
    ve->when = Clock::now();
  }
  void wait_event(Stream s, Event e) override {
    std::lock_guard lock(mu_);
    event_of(e, "wait_event");
    check_stream(s, "wait_event");
    check_sticky("cuStreamWaitEvent");
  }
  void synchronize_event(Event e) override {
    std::lock_guard lock(mu_);
    VEvent* ve = event_of(e, "synchronize_event");
    capture_.check_safe("cuEventSynchronize", "a synchronization");
    report_fault("cuEventSynchronize");
    ve->pending = false;
  }
  bool event_done(Event e) override {
    std::lock_guard lock(mu_);
    VEvent* ve = event_of(e, "event_done");
    capture_.check_safe("cuEventQuery", "a query of the device's progress");
    report_fault("cuEventQuery");
    return !ve->pending;
  }
  float elapsed_ms(Event start, Event end) override {
    std::lock_guard lock(mu_);
    VEvent* a = event_of(start, "elapsed_ms");
    VEvent* b = event_of(end, "elapsed_ms");
    check_sticky("cuEventElapsedTime");
    KILN_CHECK(a->recorded && b->recorded,
               "virtual GPU: elapsed_ms needs both events recorded (start {}, end {})",
               a->recorded ? "recorded" : "never recorded",
               b->recorded ? "recorded" : "never recorded");
    double ms = std::chrono::duration<double, std::milli>(b->when - a->when).count();
    return static_cast<float>(std::max(0.0, ms));
  }
  void synchronize() override {
    std::lock_guard lock(mu_);
    capture_.check_safe("cuCtxSynchronize", "a synchronization");
    report_fault("cuCtxSynchronize");
    complete_events();
  }

  void begin_capture(Stream s, CaptureMode mode) override {
    std::lock_guard lock(mu_);
    check_stream(s, "begin_capture");
    check_sticky("cuStreamBeginCapture_v2");
    capture_.begin(s, mode);
  }
  GraphExec end_capture(Stream s) override {
    std::lock_guard lock(mu_);
    check_stream(s, "end_capture");
    auto graph = std::make_unique<VGraph>();
    graph->nodes = capture_.end(s);
    VGraph* g = graph.release();
    graphs_.insert(g);
    return reinterpret_cast<GraphExec>(g);
  }
  bool is_capturing(Stream s) override {
    std::lock_guard lock(mu_);
    return capture_.captures(s);
  }
  CaptureMode exchange_capture_mode(CaptureMode mode) override {
    return vgpu::StreamCapture::exchange_thread_mode(mode);
  }
  // The nodes in order, each as its call would run it; a library node runs without the lock,
  // since it checks its operands through the backend.
  void launch_graph(GraphExec handle, Stream s) override {
    const VGraph* g = nullptr;
    {
      std::lock_guard lock(mu_);
      g = graph_of(handle, "launch_graph");
      check_stream(s, "launch_graph");
      KILN_CHECK(!capture_.captures(s),
                 "virtual GPU: cuGraphLaunch into a capturing stream (the virtual GPU does not "
                 "nest graphs)");
      check_sticky("cuGraphLaunch");
      ++graph_launches_;
    }
    // Execution off: a real GPU's cuGraphLaunch returns once the graph is queued, whatever its
    // nodes, so a benchmark of the host's cost must not walk them either.
    if (!kernel_execution().load(std::memory_order_relaxed)) return;
    std::vector<void*> params;
    for (const vgpu::GraphNode& node : g->nodes) {
      if (node.kind == vgpu::GraphNode::Kind::host) {
        node.host();
        continue;
      }
      std::lock_guard lock(mu_);
      check_sticky("cuGraphLaunch");
      if (node.kind == vgpu::GraphNode::Kind::kernel) {
        auto* vf = reinterpret_cast<VFunction*>(node.function);
        KILN_CHECK_AS(LaunchError, functions_.count(vf),
                      "virtual GPU: a graph launches a kernel whose module was unloaded");
        params.clear();
        for (std::uint64_t offset : node.param_offsets)
          params.push_back(const_cast<std::uint8_t*>(node.params.data()) + offset);
        execute(*vf, node.grid, node.block, node.dynamic_shared, params.data());
        continue;
      }
      mem_.check_range(node.dst, node.bytes, "graph copy or memset destination");
      if (node.kind == vgpu::GraphNode::Kind::copy) {
        mem_.check_range(node.src, node.bytes, "graph copy source");
        std::memmove(reinterpret_cast<void*>(node.dst), reinterpret_cast<const void*>(node.src),
                     node.bytes);
      } else {
        std::memset(reinterpret_cast<void*>(node.dst), node.value, node.bytes);
      }
      mem_.mark_initialized(node.dst, node.bytes);
    }
  }
  void destroy_graph(GraphExec handle) override {
    std::lock_guard lock(mu_);
    VGraph* g = graph_of(handle, "destroy_graph");
    graphs_.erase(g);
    delete g;
  }
  // A library call computed on the host: run now, or recorded where `s` is capturing.
  void host_work(Stream s, std::function<void()> work) {
    {
      std::lock_guard lock(mu_);
      check_stream(s, "a library call");
      check_sticky("a library call");
      if (capture_.captures(s)) {
        vgpu::GraphNode node;
        node.kind = vgpu::GraphNode::Kind::host;
        node.host = std::move(work);
        return capture_.record(std::move(node));
      }
    }
    if (kernel_execution().load(std::memory_order_relaxed)) work();
  }

  std::uint64_t graph_launches() {
    std::lock_guard lock(mu_);
    return graph_launches_;
  }
  std::uint64_t instructions() const { return instructions_; }
  std::uint64_t legacy_stream_calls() {
    std::lock_guard lock(mu_);
    return legacy_stream_calls_;
  }
  vgpu::FaultMode set_fault_mode(vgpu::FaultMode mode) {
    std::lock_guard lock(mu_);
    fault_.clear();
    fault_reported_ = false;
    return std::exchange(fault_mode_, mode);
  }
  void check_range(DevicePtr ptr, std::uint64_t bytes, const char* what) {
    std::lock_guard lock(mu_);
    mem_.check_range(ptr, bytes, what);
  }
  void mark_initialized(DevicePtr ptr, std::uint64_t bytes) {
    std::lock_guard lock(mu_);
    mem_.mark_initialized(ptr, bytes);
  }

 private:
  std::mutex mu_;
  vgpu::MemoryMap mem_;
  DeviceProperties props_;
  std::set<VModule*> modules_;
  std::set<VFunction*> functions_;
  std::set<VStream*> streams_;
  std::set<VEvent*> events_;
  std::set<VGraph*> graphs_;
  vgpu::StreamCapture capture_;
  std::uint64_t graph_launches_ = 0;
  std::uint64_t instructions_ = 0;
  std::uint64_t legacy_stream_calls_ = 0;  // stream calls given the legacy (null) stream
  PinnedRanges pinned_;
  // Late faults (vgpu::FaultMode::late): the driver's error for the fault the device stopped at
  // (empty: none), and whether a call has reported it (from then on every call does).
  vgpu::FaultMode fault_mode_ = vgpu::FaultMode::immediate;
  std::string fault_;
  bool fault_reported_ = false;

  // A call that waits for the device reports a recorded fault, as the driver's `call` would.
  void report_fault(const char* call) {
    if (fault_.empty()) return;
    fault_reported_ = true;
    throw KernelFault(fmt::format(
        "{} failed: {} (a kernel launched earlier faulted: CUDA reports it at the next call that "
        "waits for the device, and every call after it fails too; KILN_LAUNCH_BLOCKING=1 raises "
        "it at the launch, naming the kernel)",
        call, fault_));
  }
  // Any other call fails once the fault was reported: the context is poisoned.
  void check_sticky(const char* call) {
    if (fault_reported_) report_fault(call);
  }

  // Streams are one queue that runs at once; held events complete at a synchronization.
  void complete_events() {
    for (VEvent* e : events_) e->pending = false;
  }

  void check_stream(Stream s, const char* what) {
    if (s == nullptr) {
      ++legacy_stream_calls_;
      capture_.check_legacy(what);
      return;
    }
    KILN_CHECK(streams_.count(reinterpret_cast<VStream*>(s)),
               "virtual GPU: {} on an invalid stream (destroyed or never created)", what);
  }
  VModule* module_of(Module h, const char* what) const {
    auto* m = reinterpret_cast<VModule*>(h);
    KILN_CHECK(modules_.count(m), "virtual GPU: {} of an invalid module handle", what);
    return m;
  }
  VGraph* graph_of(GraphExec h, const char* what) const {
    auto* g = reinterpret_cast<VGraph*>(h);
    KILN_CHECK(graphs_.count(g), "virtual GPU: {} of an invalid graph (destroyed or never made)",
               what);
    return g;
  }
  void record_memory_node(vgpu::GraphNode::Kind kind, DevicePtr dst, DevicePtr src,
                          std::uint8_t value, std::size_t bytes) {
    vgpu::GraphNode node;
    node.kind = kind;
    node.dst = dst;
    node.src = src;
    node.value = value;
    node.bytes = bytes;
    capture_.record(std::move(node));
  }
  // The launch as a graph node: its parameters copied, as cuLaunchKernel copies them.
  void record_launch(cuda::Function handle, Dim3 grid, Dim3 block, unsigned dynamic_shared,
                     void** params) {
    const vgpu::Function& k = *reinterpret_cast<VFunction*>(handle)->fn;
    vgpu::GraphNode node;
    node.function = handle;
    node.grid = grid;
    node.block = block;
    node.dynamic_shared = dynamic_shared;
    node.params.resize(k.param_bytes);
    for (std::size_t i = 0; i < k.params.size(); ++i) {
      KILN_CHECK_AS(LaunchError, params != nullptr && params[i] != nullptr,
                    "launch of kernel '{}': params[{}] is null", k.name, i);
      std::memcpy(node.params.data() + k.params[i].offset, params[i], k.params[i].size);
      node.param_offsets.push_back(k.params[i].offset);
    }
    capture_.record(std::move(node));
  }
  VEvent* event_of(Event h, const char* what) const {
    auto* e = reinterpret_cast<VEvent*>(h);
    KILN_CHECK(events_.count(e), "virtual GPU: {} on an invalid event (destroyed or never created)",
               what);
    return e;
  }
};

}  // namespace

std::unique_ptr<Backend> make_virtual_backend() {
  return std::make_unique<VirtualBackend>();
}

namespace vgpu {
namespace {
// `backend` as the virtual GPU, or an Error naming the extra `what` that asked.
VirtualBackend& virtual_of(Backend& backend, const char* what) {
  auto* v = dynamic_cast<VirtualBackend*>(&backend);
  KILN_CHECK(v != nullptr, "{}: backend '{}' is not the virtual GPU", what, backend.kind());
  return *v;
}
}  // namespace

std::uint64_t executed_thread_instructions(Backend& backend) {
  return virtual_of(backend, "executed_thread_instructions").instructions();
}

std::uint64_t graph_launches(Backend& backend) {
  return virtual_of(backend, "graph_launches").graph_launches();
}

void run_host_work(Backend& backend, Stream stream, std::function<void()> work) {
  virtual_of(backend, "run_host_work").host_work(stream, std::move(work));
}

std::uint64_t legacy_stream_calls(Backend& backend) {
  return virtual_of(backend, "legacy_stream_calls").legacy_stream_calls();
}

void check_device_range(Backend& backend, DevicePtr ptr, std::uint64_t bytes, const char* what) {
  VirtualBackend& v = virtual_of(backend, "check_device_range");
  if (bytes) v.check_range(ptr, bytes, what);
}

void mark_device_initialized(Backend& backend, DevicePtr ptr, std::uint64_t bytes) {
  if (auto* v = dynamic_cast<VirtualBackend*>(&backend); v && bytes)
    v->mark_initialized(ptr, bytes);
}

void set_compute_capability(Backend& backend, int major, int minor) {
  virtual_of(backend, "set_compute_capability").set_compute_capability(major, minor);
}

void set_sm_count(Backend& backend, int sm_count) {
  virtual_of(backend, "set_sm_count").set_sm_count(sm_count);
}

void set_shared_memory_optin(Backend& backend, std::size_t bytes) {
  virtual_of(backend, "set_shared_memory_optin").set_shared_memory_optin(bytes);
}

FaultMode set_fault_mode(Backend& backend, FaultMode mode) {
  return virtual_of(backend, "set_fault_mode").set_fault_mode(mode);
}

bool hold_events(bool on) {
  return events_held().exchange(on);
}

bool set_kernel_execution(bool on) {
  return kernel_execution().exchange(on);
}
}  // namespace vgpu

}  // namespace kiln::cuda
