// The in-process kernel cache (see kernel_cache.h).
#include "jit/codegen/kernel_cache.h"

#include <mutex>
#include <unordered_map>

#include "jit/nvrtc/nvrtc.h"

namespace kiln::jit::codegen {

cuda::Function compiled_function(const std::string& name, const std::string& source) {
  static std::mutex mutex;
  static std::unordered_map<std::string, cuda::Function> functions;
  std::lock_guard lock(mutex);
  auto it = functions.find(source);
  if (it != functions.end()) return it->second;
  cuda::Backend& be = cuda::backend();
  auto module =
      nvrtc::compile_program(source, name + ".cu", nvrtc::Target::for_device(be.properties(0)));
  cuda::Function fn = be.get_function(be.load_module(module.image()), name);
  functions.emplace(source, fn);
  return fn;
}

}  // namespace kiln::jit::codegen
