// The in-process kernel cache (see kernel_cache.h); cache/ is the disk behind it.
#include "jit/codegen/kernel_cache.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "cache/batch_compile.h"
#include "cache/kernel_store.h"
#include "cache/progress.h"
#include "jit/codegen/codegen_version.h"
#include "jit/codegen/launch_stats.h"
#include "runtime/cuda/nvrtc/nvrtc.h"
#include "runtime/log.h"

namespace kiln::jit::codegen {
namespace {

std::mutex& memory_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Loaded functions by source: a memory hit costs one hash of the source.
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

// Loads `image` (once per distinct image) and remembers the function; the memory mutex is held.
cuda::Function remember(const std::string& name, const std::string& source,
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
  memory().emplace(source, fn);
  return fn;
}

}  // namespace

cuda::Function compiled_function(const std::string& name, const std::string& source) {
  std::lock_guard lock(memory_mutex());
  auto it = memory().find(source);
  if (it != memory().end()) {
    ++launch_stats().cache_hits;
    return it->second;
  }
  return remember(name, source, cache::fetch_or_compile(request(name, source)));
}

void prepare_kernels(const std::vector<KernelSource>& kernels) {
  std::lock_guard lock(memory_mutex());
  // Memory and disk first: only what neither holds counts towards the progress bar.
  std::vector<const KernelSource*> to_compile;
  for (const auto& k : kernels) {
    if (memory().count(k.source)) continue;
    if (auto image = cache::fetch_from_disk(request(k.name, k.source)))
      remember(k.name, k.source, *image);
    else if (std::none_of(to_compile.begin(), to_compile.end(),
                          [&](const KernelSource* s) { return s->source == k.source; }))
      to_compile.push_back(&k);
  }
  // The misses compile as one NVRTC program (cache/batch_compile.h), kernels of a name already
  // in it one by one; a program that fails compiles again kernel by kernel to name the culprit.
  std::vector<const KernelSource*> alone;
  std::vector<cache::KernelRequest> requests;
  std::set<std::string> names;
  for (const KernelSource* k : to_compile)
    if (names.insert(k->name).second)
      requests.push_back(request(k->name, k->source));
    else
      alone.push_back(k);
  if (requests.size() == 1) {  // a program of one: the plain path, with its cross-process lock
    alone.insert(alone.begin(), to_compile.front());
    requests.clear();
  }
  cache::CompileProgress progress(static_cast<int>(to_compile.size()));
  if (!requests.empty()) {
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
    for (std::size_t i = 0; i < requests.size(); ++i)
      remember(requests[i].name, requests[i].source, images[i]);
  }
  for (const KernelSource* k : alone) {
    progress.start(k->name);
    remember(k->name, k->source, cache::fetch_or_compile(request(k->name, k->source)));
  }
  progress.finish();
}

void launch_generated(const std::string& name, const std::string& source, cuda::Dim3 grid,
                      cuda::Dim3 block, void** params, std::int64_t bytes_read,
                      std::int64_t bytes_written) {
  cuda::Function fn = compiled_function(name, source);
  auto& stats = launch_stats();
  ++stats.launches;
  stats.bytes_read += bytes_read;
  stats.bytes_written += bytes_written;
  if (!stats.timing.load(std::memory_order_relaxed))
    return cuda::backend().launch(fn, grid, block, 0, nullptr, params);
  auto start = std::chrono::steady_clock::now();
  cuda::backend().launch(fn, grid, block, 0, nullptr, params);
  stats.launch_ns +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
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

}  // namespace kiln::jit::codegen
