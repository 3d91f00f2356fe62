// This thread's schedule limits (see schedule_limits.h).
#include "jit/codegen/schedule_limits.h"

namespace kiln::jit::codegen {
namespace {

ScheduleLimits& current() {
  thread_local ScheduleLimits limits;
  return limits;
}

}  // namespace

const ScheduleLimits& schedule_limits() {
  return current();
}

ScopedScheduleLimits::ScopedScheduleLimits(const ScheduleLimits& limits) : previous_(current()) {
  current() = limits;
}

ScopedScheduleLimits::~ScopedScheduleLimits() {
  current() = previous_;
}

}  // namespace kiln::jit::codegen
