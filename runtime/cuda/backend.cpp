// kiln::cuda::backend(): the process-wide CUDA backend, chosen once from KILN_CUDA.
#include "runtime/cuda/backend.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "runtime/cuda/backends.h"
#include "runtime/cuda/selection.h"
#include "runtime/error.h"

namespace kiln::cuda {
namespace {

// One slot per kind. Backends live until exit and are never destroyed: kernels may still be
// referenced by static objects whose destructors run in an unknown order.
struct Registry {
  std::mutex mutex;
  Backend* driver = nullptr;
  Backend* virtual_gpu = nullptr;
  // What backend() returns, once chosen; read without the mutex, since every launch asks.
  std::atomic<Backend*> chosen{nullptr};
};

Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

Backend*& slot(Registry& r, std::string_view kind) {
  return kind == "driver" ? r.driver : r.virtual_gpu;
}

}  // namespace

BackendChoice parse_backend_choice(std::string_view value) {
  if (value == "driver") return BackendChoice::driver;
  if (value == "virtual") return BackendChoice::virtual_;
  if (value == "auto" || value.empty()) return BackendChoice::auto_;
  throw Error(
      fmt::format("KILN_CUDA='{}' is not a CUDA backend: choose driver, virtual or auto", value));
}

Selection select_backend(BackendChoice choice) {
  Selection s;
  switch (choice) {
    case BackendChoice::driver:
      s.backend = make_driver_backend();
      break;
    case BackendChoice::virtual_:
      s.backend = make_virtual_backend();
      break;
    case BackendChoice::auto_:
      try {
        s.backend = make_driver_backend();
      } catch (const Error& e) {
        s.notice = fmt::format("kiln: {}; using the virtual GPU", e.what());
        s.backend = make_virtual_backend();
      }
      break;
  }
  return s;
}

Backend& backend(std::string_view kind) {
  auto& r = registry();
  if (kind == "auto") return backend();
  KILN_CHECK(kind == "driver" || kind == "virtual",
             "backend('{}'): unknown CUDA backend kind: choose driver, virtual or auto", kind);
  std::lock_guard lock(r.mutex);
  auto& s = slot(r, kind);
  if (!s) {
    auto made = select_backend(kind == "driver" ? BackendChoice::driver : BackendChoice::virtual_);
    s = made.backend.release();
  }
  return *s;
}

Backend& backend() {
  auto& r = registry();
  if (Backend* b = r.chosen.load(std::memory_order_acquire)) return *b;
  std::lock_guard lock(r.mutex);
  if (Backend* b = r.chosen.load()) return *b;
  const char* env = std::getenv("KILN_CUDA");
  auto choice = parse_backend_choice(env ? env : "");
  if (choice == BackendChoice::driver && r.driver) return *(r.chosen = r.driver);
  if (choice == BackendChoice::virtual_ && r.virtual_gpu)
    return *(r.chosen = r.virtual_gpu);
  if (choice == BackendChoice::auto_ && r.driver) return *(r.chosen = r.driver);
  Selection made;
  try {
    made = select_backend(choice);
  } catch (const Error& e) {
    throw Error(fmt::format("KILN_CUDA={}: {}", env ? env : "auto", e.what()));
  }
  if (!made.notice.empty()) std::fprintf(stderr, "%s\n", made.notice.c_str());
  auto& s = slot(r, made.backend->kind());
  if (!s) s = made.backend.release();  // else: keep the instance tests already use
  r.chosen = s;
  return *s;
}

}  // namespace kiln::cuda
