// The limits a launch's schedule is chosen within. Production runs the defaults; tests and
// benchmarks narrow them for a scope (ScopedScheduleLimits) to run a slower path on the same data
// (the generic reduction layout, the scalar pointwise loop, a lowered 32-bit index limit) and
// compare. One value that every schedule function takes, instead of a switch per renderer.
#pragma once

#include <cstdint>

#include "jit/codegen/pointwise_layout.h"

namespace kiln::jit::codegen {

// How a row reduction addresses a row's columns (the kernels' `layout`): through the reduced
// dims' strides (generic); as row base + column in 32-bit arithmetic (flat); and `vector` columns
// a 16-byte access (vector). See reduction_schedule.h for when each applies.
enum class ReductionLayout { generic = 0, flat = 1, vector = 2 };

struct ScheduleLimits {
  // Reductions: the most a launch may take, whether short rows may take a warp each and rows
  // along outer dims the outer schedule, and the row length (and row count, and row stride)
  // beyond which a launch takes the generic layout: 2^31 less a block's stride (1024 threads x 16
  // columns), so a row's last column plus the stride stays below 2^31.
  ReductionLayout reduction_layout = ReductionLayout::vector;
  bool warp_rows = true;
  bool outer_rows = true;
  std::int64_t reduction_index_limit = kIndexLimit - 1024 * 16;
  // Pointwise: the vector path, its advancing offsets (pointwise_layout.h: plan_advance), and the
  // element count and offset beyond which a launch is cut into pieces.
  bool pointwise_vectors = true;
  bool pointwise_advance = true;
  std::int64_t pointwise_index_limit = kIndexLimit;
};

// This thread's limits: the defaults, unless a ScopedScheduleLimits narrows them. Per thread, so
// that a test's scope never changes the launches of another thread.
const ScheduleLimits& schedule_limits();

// Sets this thread's limits for its lifetime; the previous ones come back on destruction, also
// when an assertion throws.
class ScopedScheduleLimits {
 public:
  explicit ScopedScheduleLimits(const ScheduleLimits& limits);
  ~ScopedScheduleLimits();
  ScopedScheduleLimits(const ScopedScheduleLimits&) = delete;
  ScopedScheduleLimits& operator=(const ScopedScheduleLimits&) = delete;

 private:
  ScheduleLimits previous_;
};

}  // namespace kiln::jit::codegen
