// The in-process kernel cache (see kernel_cache.h).
#include "jit/codegen/kernel_cache.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>

#include "jit/codegen/launch_stats.h"
#include "jit/log.h"
#include "jit/nvrtc/nvrtc.h"

namespace kiln::jit::codegen {

cuda::Function compiled_function(const std::string& name, const std::string& source) {
  static std::mutex mutex;
  static std::unordered_map<std::string, cuda::Function> functions;
  std::lock_guard lock(mutex);
  auto it = functions.find(source);
  if (it != functions.end()) {
    ++launch_stats().cache_hits;
    return it->second;
  }
  cuda::Backend& be = cuda::backend();
  auto module =
      nvrtc::compile_program(source, name + ".cu", nvrtc::Target::for_device(be.properties(0)));
  cuda::Function fn = be.get_function(be.load_module(module.image()), name);
  ++launch_stats().compiles;
  launch_stats().compile_us += static_cast<std::int64_t>(module.compile_ms * 1000);
  if (log_enabled(LogTopic::kernels)) {
    const nvrtc::KernelResources* r = module.kernel(name);
    auto count = [](long v) { return v < 0 ? std::string("n/a") : std::to_string(v); };
    log_line(fmt::format(
        "kiln: kernel {}: {} bytes of source, compiled in {:.1f} ms for {}; registers {}, spills "
        "{}, shared memory {} bytes{}",
        name, source.size(), module.compile_ms, module.target.arch(), count(r ? r->registers : -1),
        count(r ? r->spill_store_bytes : -1), count(r ? r->shared_bytes : -1),
        module.target.cubin ? "" : " (a PTX target: ptxas reports resources for cubins)"));
  }
  functions.emplace(source, fn);
  return fn;
}

void launch_generated(const std::string& name, const std::string& source, cuda::Dim3 grid,
                      cuda::Dim3 block, void** params, std::int64_t bytes_read,
                      std::int64_t bytes_written) {
  cuda::Function fn = compiled_function(name, source);
  auto& stats = launch_stats();
  ++stats.launches;
  stats.bytes_read += bytes_read;
  stats.bytes_written += bytes_written;
  cuda::backend().launch(fn, grid, block, 0, nullptr, params);
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
