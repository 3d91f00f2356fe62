// How a pointwise kernel runs one call: a pure function from the kernel, the call's domain,
// strides and addresses and the limits (schedule_limits.h) to a PointwiseSchedule value: the
// launches (one, unless 32-bit indices do not reach every element), and for each whether it takes
// the vector path, whether its offsets advance, and its grid. Every launch runs the kernel's one
// source; the schedule only chooses its arguments.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "jit/codegen/pointwise_layout.h"
#include "jit/codegen/schedule_limits.h"

namespace kiln::jit::codegen {

struct PointwiseKernel;

// Threads of a pointwise block.
inline constexpr unsigned kPointwiseBlock = 256;

struct PointwiseLaunch {
  IterPiece piece;                          // the part of the merged domain it covers
  std::vector<TensorAccess> reads, writes;  // the tensors at the piece's first elements
  std::int64_t vectors = 0;                 // groups of the kernel's width on the vector path
  AdvancePlan advance;                      // offsets that advance instead of being computed
  unsigned blocks = 0;
};

struct PointwiseSchedule {
  std::vector<PointwiseLaunch> launches;
  // "1 launch; 16384 elements, 4096 vectors (advancing), 128 blocks of 256"
  std::string str() const;
};

// The schedule of one call over `space` (the domain and each read's strides, before merging),
// its tensors at `reads` and `writes`. With `why`, the reason for each choice is appended.
PointwiseSchedule schedule_pointwise(const PointwiseKernel& kernel, const IterSpace& space,
                                     std::span<const TensorAccess> reads,
                                     std::span<const TensorAccess> writes,
                                     const ScheduleLimits& limits,
                                     std::vector<std::string>* why = nullptr);

}  // namespace kiln::jit::codegen
