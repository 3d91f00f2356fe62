// The in-process kernel cache (see kernel_cache.h); cache/ is the disk behind it.
#include "jit/codegen/kernel_cache.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "cache/batch_compile.h"
#include "cache/kernel_key.h"
#include "cache/kernel_store.h"
#include "cache/progress.h"
#include "jit/codegen/codegen_version.h"
#include "jit/codegen/launch_stats.h"
#include "runtime/cuda/current_stream.h"
#include "runtime/cuda/nvrtc/nvrtc.h"
#include "runtime/log.h"

namespace kiln::jit::codegen {

struct KernelHandle::State {
  std::string name, source;
  std::atomic<cuda::Function> function{nullptr};
  std::atomic<unsigned> opted_in_shared{0};  // the dynamic shared memory opted in to so far
};

namespace {

std::mutex& memory_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Loaded functions by kernel code (cache::kernel_code): taken once per handle, when it resolves.
std::unordered_map<std::string, cuda::Function>& memory() {
  static std::unordered_map<std::string, cuda::Function> functions;
  return functions;
}

cache::KernelRequest request(const std::string& name, const std::string& source) {
  return cache::KernelRequest{
      name, source, nvrtc::Target::for_device(cuda::backend().properties(0)), {}, kCodegenVersion};
}

// Loaded modules by image: the kernels compiled in one program share one image (and one entry
// image on disk each), loaded once.
std::unordered_map<std::string, cuda::Module>& modules() {
  static std::unordered_map<std::string, cuda::Module> loaded;
  return loaded;
}

// Loads `image` (once per distinct image) and remembers the function under `code`; the memory
// mutex is held.
cuda::Function remember(const std::string& name, const std::string& source, const std::string& code,
                        const cache::KernelImage& image) {
  cuda::Backend& be = cuda::backend();
  auto loaded = modules().find(image.image);
  bool first_of_image = loaded == modules().end();
  if (first_of_image) loaded = modules().emplace(image.image, be.load_module(image.image)).first;
  cuda::Function fn = be.get_function(loaded->second, name);
  if (image.compiled) {
    const nvrtc::CompiledModule& module = *image.compiled;
    ++launch_stats().compiles;  // kernels; a program of several counts its time once
    if (first_of_image)
      launch_stats().compile_us += static_cast<std::int64_t>(module.compile_ms * 1000);
    if (log_enabled(LogTopic::kernels)) {
      const nvrtc::KernelResources* r = module.kernel(name);
      auto count = [](long v) { return v < 0 ? std::string("n/a") : std::to_string(v); };
      log_line(fmt::format(
          "kiln: kernel {}: {} bytes of source, compiled in {:.1f} ms{} for {}; registers {}, "
          "spills {}, shared memory {} bytes{}",
          name, source.size(), module.compile_ms,
          module.kernels.size() > 1
              ? fmt::format(" (one program with {} kernels)", module.kernels.size())
              : "",
          module.target.arch(), count(r ? r->registers : -1), count(r ? r->spill_store_bytes : -1),
          count(r ? r->shared_bytes : -1),
          module.target.cubin ? "" : " (a PTX target: ptxas reports resources for cubins)"));
    }
  }
  memory().emplace(code, fn);
  return fn;
}

// The function of `code` if memory holds it; the memory mutex is held.
cuda::Function in_memory(const std::string& code) {
  auto it = memory().find(code);
  if (it == memory().end()) return nullptr;
  ++launch_stats().cache_hits;
  return it->second;
}

}  // namespace

KernelHandle::KernelHandle(std::string name, std::string source)
    : state_(std::make_shared<State>()) {
  state_->name = std::move(name);
  state_->source = std::move(source);
}

const std::string& KernelHandle::name() const {
  static const std::string none;
  return state_ ? state_->name : none;
}

const std::string& KernelHandle::source() const {
  static const std::string none;
  return state_ ? state_->source : none;
}

bool KernelHandle::resolved() const {
  return state_ && state_->function.load(std::memory_order_acquire) != nullptr;
}

cuda::Function KernelHandle::function() const {
  KILN_CHECK(state_, "codegen: launch of an empty kernel handle");
  if (cuda::Function fn = state_->function.load(std::memory_order_acquire)) return fn;
  std::lock_guard lock(memory_mutex());
  if (cuda::Function fn = state_->function.load(std::memory_order_relaxed)) return fn;
  std::string code = cache::kernel_code(state_->source);
  cuda::Function fn = in_memory(code);
  if (!fn)
    fn = remember(state_->name, state_->source, code,
                  cache::fetch_or_compile(request(state_->name, state_->source)));
  state_->function.store(fn, std::memory_order_release);
  return fn;
}

void prepare_kernels(std::span<const KernelHandle* const> kernels) {
  std::lock_guard lock(memory_mutex());
  // Memory and disk first: only what neither holds counts towards the progress bar, and a code
  // several handles share is compiled once.
  struct Miss {
    const KernelHandle* handle;
    std::string code;
    std::vector<const KernelHandle*> same;  // later handles with the same code
  };
  std::vector<Miss> to_compile;
  auto set = [](const KernelHandle& h, cuda::Function fn) {
    h.state_->function.store(fn, std::memory_order_release);
  };
  for (const KernelHandle* k : kernels) {
    if (k->empty() || k->resolved()) continue;
    std::string code = cache::kernel_code(k->source());
    if (cuda::Function fn = in_memory(code)) {
      set(*k, fn);
      continue;
    }
    auto pending = std::find_if(to_compile.begin(), to_compile.end(),
                                [&](const Miss& m) { return m.code == code; });
    if (pending != to_compile.end()) {
      pending->same.push_back(k);
      continue;
    }
    if (auto image = cache::fetch_from_disk(request(k->name(), k->source())))
      set(*k, remember(k->name(), k->source(), code, *image));
    else
      to_compile.push_back({k, std::move(code), {}});
  }
  auto resolve = [&](const Miss& m, const cache::KernelImage& image) {
    cuda::Function fn = remember(m.handle->name(), m.handle->source(), m.code, image);
    set(*m.handle, fn);
    for (const KernelHandle* h : m.same) set(*h, fn);
  };
  // The misses compile as one NVRTC program (cache/batch_compile.h), kernels of a name already
  // in it one by one; a program that fails compiles again kernel by kernel to name the culprit.
  std::vector<const Miss*> together, alone;
  std::set<std::string> names;
  for (const Miss& m : to_compile)
    (names.insert(m.handle->name()).second ? together : alone).push_back(&m);
  if (together.size() == 1) {  // a program of one: the plain path, with its cross-process lock
    alone.insert(alone.begin(), together.front());
    together.clear();
  }
  cache::CompileProgress progress(static_cast<int>(to_compile.size()));
  if (!together.empty()) {
    std::vector<cache::KernelRequest> requests;
    for (const Miss* m : together)
      requests.push_back(request(m->handle->name(), m->handle->source()));
    std::vector<const cache::KernelRequest*> batch;
    for (const auto& r : requests) batch.push_back(&r);
    progress.start(fmt::format("{} kernels in one program", batch.size()));
    std::vector<cache::KernelImage> images;
    try {
      images = cache::compile_together(batch);
    } catch (const nvrtc::CompileError&) {
      for (const auto& r : requests)
        images.push_back(cache::fetch_or_compile(r));  // raises for the kernel at fault
    }
    for (std::size_t i = 0; i < together.size(); ++i) resolve(*together[i], images[i]);
  }
  for (const Miss* m : alone) {
    progress.start(m->handle->name());
    resolve(*m, cache::fetch_or_compile(request(m->handle->name(), m->handle->source())));
  }
  progress.finish();
}

void KernelHandle::launch(cuda::Dim3 grid, cuda::Dim3 block, void** params, std::int64_t bytes_read,
                          std::int64_t bytes_written) const {
  launch(grid, block, 0, params, bytes_read, bytes_written);
}

void KernelHandle::launch(cuda::Dim3 grid, cuda::Dim3 block, unsigned dynamic_shared, void** params,
                          std::int64_t bytes_read, std::int64_t bytes_written) const {
  cuda::Function fn = function();
  if (dynamic_shared > state_->opted_in_shared.load(std::memory_order_acquire)) {
    // Once per size reached (a race repeats it, harmlessly: the attribute only grows); the
    // driver skips what the function's default limit already allows.
    cuda::backend().set_max_dynamic_shared(fn, dynamic_shared);
    unsigned seen = state_->opted_in_shared.load();
    while (seen < dynamic_shared &&
           !state_->opted_in_shared.compare_exchange_weak(seen, dynamic_shared)) {
    }
  }
  const cuda::Stream stream = cuda::current_stream();
  auto& stats = launch_stats();
  stats.launches.fetch_add(1, std::memory_order_relaxed);
  stats.bytes_read.fetch_add(bytes_read, std::memory_order_relaxed);
  stats.bytes_written.fetch_add(bytes_written, std::memory_order_relaxed);
  if (!stats.timing.load(std::memory_order_relaxed))
    return cuda::backend().launch(fn, grid, block, dynamic_shared, stream, params);
  auto start = std::chrono::steady_clock::now();
  cuda::backend().launch(fn, grid, block, dynamic_shared, stream, params);
  auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  stats.launch_ns += ns;
  thread_launch_ns() += ns;
}

unsigned grid_stride_blocks(long long n, unsigned block) {
  long long waves = static_cast<long long>(cuda::backend().properties(0).sm_count) * 8;
  return static_cast<unsigned>(std::max(1LL, std::min((n + block - 1) / block, waves)));
}

std::int64_t tensor_bytes(const Tensor& t) {
  return t.numel() * static_cast<std::int64_t>(itemsize(t.dtype()));
}

LaunchStats& launch_stats() {
  static LaunchStats stats;
  return stats;
}

std::int64_t& thread_launch_ns() {
  thread_local std::int64_t ns = 0;
  return ns;
}

}  // namespace kiln::jit::codegen
