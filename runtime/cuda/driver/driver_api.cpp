// Resolves the driver API table from libcuda.so.1 (dlopen, never linked) and initializes it.
#include "runtime/cuda/driver/driver_api.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "runtime/error.h"

namespace kiln::cuda::driver {
namespace {

struct Loaded {
  DriverApi api;
  std::string error;  // non-empty: the driver could not be used, and why
};

Loaded load() {
  Loaded out;
  // RTLD_LOCAL keeps libcuda's symbols out of the global namespace. The handle is never closed:
  // unloading the driver while the process may still hold contexts is unsafe.
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    out.error =
        fmt::format("no CUDA driver found ({})", why ? why : "dlopen(\"libcuda.so.1\") failed");
    return out;
  }
  auto& api = out.api;
#define KILN_DRIVER_RESOLVE(member, symbol, decl)                                               \
  api.member = reinterpret_cast<decltype(api.member)>(dlsym(handle, symbol));                   \
  if (!api.member) {                                                                            \
    out.error = fmt::format("the CUDA driver libcuda.so.1 lacks {} (driver too old?)", symbol); \
    return out;                                                                                 \
  }
  KILN_DRIVER_FUNCTIONS(KILN_DRIVER_RESOLVE)
#undef KILN_DRIVER_RESOLVE

  CUresult r = api.init(0);
  if (r == CUDA_ERROR_STUB_LIBRARY) {
    out.error =
        "no CUDA driver found (libcuda.so.1 is the CUDA toolkit's stub library, not a "
        "driver: cuInit returned CUDA_ERROR_STUB_LIBRARY)";
    return out;
  }
  if (r != CUDA_SUCCESS) {
    out.error = fmt::format("the CUDA driver failed to initialize: cuInit(0) returned {}",
                            error_text(api, r));
    return out;
  }
  api.driver_get_version(&api.driver_version);
  return out;
}

}  // namespace

const DriverApi& driver_api() {
  static const Loaded loaded = load();  // thread-safe static initialization
  if (!loaded.error.empty()) throw Error(loaded.error);
  return loaded.api;
}

std::string error_text(const DriverApi& api, CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.get_error_name) api.get_error_name(result, &name);
  if (api.get_error_string) api.get_error_string(result, &text);
  return fmt::format("{} ({})", name ? name : fmt::format("CUresult {}", static_cast<int>(result)),
                     text ? text : "no description");
}

}  // namespace kiln::cuda::driver
