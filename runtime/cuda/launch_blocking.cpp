// The launch-blocking switch both backends read (see launch_blocking.h).
#include "runtime/cuda/launch_blocking.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>

#include "runtime/error.h"

namespace kiln::cuda {
namespace {

std::atomic<bool>& blocking() {
  static std::atomic<bool> on{launch_blocking_value(std::getenv("KILN_LAUNCH_BLOCKING"))};
  return on;
}

}  // namespace

bool launch_blocking_value(const char* value) {
  if (value == nullptr || std::string_view(value).empty() || std::string_view(value) == "0")
    return false;
  KILN_CHECK(std::string_view(value) == "1", "KILN_LAUNCH_BLOCKING='{}': expected 0 or 1", value);
  return true;
}

bool launch_blocking() {
  return blocking().load(std::memory_order_relaxed);
}

bool set_launch_blocking(bool on) {
  return blocking().exchange(on);
}

std::string launch_text(std::string_view kernel, Dim3 grid, Dim3 block, unsigned dynamic_shared) {
  return fmt::format("'{}' grid ({},{},{}) block ({},{},{}) dynamic shared {} bytes", kernel,
                     grid.x, grid.y, grid.z, block.x, block.y, block.z, dynamic_shared);
}

std::string blocking_launch_failure(std::string_view launch, std::string_view sync_call,
                                    std::string_view error) {
  return fmt::format("kernel {} failed (KILN_LAUNCH_BLOCKING=1: {} after the launch): {}", launch,
                     sync_call, error);
}

}  // namespace kiln::cuda
