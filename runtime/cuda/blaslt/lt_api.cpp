// Resolves the cuBLASLt table from libcublasLt.so.13, or .so.12 (dlopen, never linked).
#include "runtime/cuda/blaslt/lt_api.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <vector>

#include "runtime/cuda/cuda_versions.h"
#include "runtime/error.h"

#ifndef KILN_CUDA_LIBRARY_DIR
#define KILN_CUDA_LIBRARY_DIR "/usr/local/cuda/lib64"
#endif

namespace kiln::cuda::blaslt {
namespace {

struct Loaded {
  LtApi api;
  std::string error;
};

Loaded load() {
  Loaded out;
  // .so.13 first; the CUDA 12 library where it is absent (the entry points kiln uses are the same).
  std::vector<std::string> tries =
      cublaslt_candidates(std::getenv("CUDA_HOME"), KILN_CUDA_LIBRARY_DIR);
  void* handle = nullptr;
  std::string why;
  for (const auto& path : tries) {
    // Never closed, as libcuda: handles and descriptors may outlive any scope here.
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      out.api.path = path;
      break;
    }
    const char* e = dlerror();
    why += fmt::format("{}{}: {}", why.empty() ? "" : "; ", path, e ? e : "dlopen failed");
  }
  if (!handle) {
    out.error = fmt::format("cuBLASLt could not be loaded ({})", why);
    return out;
  }
  auto& api = out.api;
#define KILN_CUBLASLT_RESOLVE(member, symbol, decl)                                       \
  api.member = reinterpret_cast<decltype(api.member)>(dlsym(handle, symbol));             \
  if (!api.member) {                                                                      \
    out.error = fmt::format("cuBLASLt library {} lacks {} (too old?)", api.path, symbol); \
    return out;                                                                           \
  }
  KILN_CUBLASLT_FUNCTIONS(KILN_CUBLASLT_RESOLVE)
#undef KILN_CUBLASLT_RESOLVE
  api.version = api.get_version();
  return out;
}

}  // namespace

const LtApi& lt_api() {
  static const Loaded loaded = load();
  if (!loaded.error.empty()) throw Error(loaded.error);
  return loaded.api;
}

std::string status_text(cublasStatus_t status) {
  const LtApi& api = lt_api();
  return fmt::format("{} ({})", api.get_status_name(status), api.get_status_string(status));
}

void check_status(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw Error(fmt::format("{}: {}", what, status_text(status)));
}

}  // namespace kiln::cuda::blaslt
