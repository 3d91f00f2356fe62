// The registry of multi-tensor implementations (see multi_tensor.h).
#include "runtime/multi_tensor.h"

#include <array>
#include <atomic>

namespace kiln {
namespace {

// One slot per device type; written by static initializers, read on every optimizer step.
std::array<std::atomic<MultiTensorBackend*>, 2>& slots() {
  static std::array<std::atomic<MultiTensorBackend*>, 2> registered{};
  return registered;
}

}  // namespace

void register_multi_tensor_backend(Device::Type type, MultiTensorBackend* backend) {
  slots()[static_cast<std::size_t>(type)].store(backend, std::memory_order_release);
}

MultiTensorBackend* multi_tensor_backend(Device::Type type) {
  return slots()[static_cast<std::size_t>(type)].load(std::memory_order_acquire);
}

}  // namespace kiln
