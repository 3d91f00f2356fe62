// Cases about what kiln chooses or refuses on another GPU than the one running them (another
// architecture, a smaller shared-memory budget): the virtual GPU made to report that device for
// a scope, and put back (its compute capability and that architecture's limits) however the
// scope ends. On a real GPU such a case is skipped: skip_if(needs_virtual_gpu).
#pragma once

#include <cstddef>
#include <string>

#include "runtime/cuda/backend.h"
#include "runtime/cuda/virtual/virtual_backend.h"

namespace kiln::test {

inline std::string needs_virtual_gpu() {
  return cuda::backend().kind() == "virtual"
             ? ""
             : "the case makes the virtual GPU model another device";
}

class VirtualDeviceScope {
 public:
  // Compute capability major.minor with its architecture's limits; `shared_optin` (bytes), when
  // nonzero, as the most shared memory a block may have instead.
  VirtualDeviceScope(int major, int minor, std::size_t shared_optin = 0)
      : major_(cuda::backend().properties(0).compute_major),
        minor_(cuda::backend().properties(0).compute_minor) {
    cuda::vgpu::set_compute_capability(cuda::backend(), major, minor);
    if (shared_optin) cuda::vgpu::set_shared_memory_optin(cuda::backend(), shared_optin);
  }
  ~VirtualDeviceScope() { cuda::vgpu::set_compute_capability(cuda::backend(), major_, minor_); }
  VirtualDeviceScope(const VirtualDeviceScope&) = delete;
  VirtualDeviceScope& operator=(const VirtualDeviceScope&) = delete;

 private:
  int major_, minor_;
};

}  // namespace kiln::test
