// What one PTX thread-instruction costs the GPU's issue: the weight the profiler (profiler.h)
// gives each executed instruction, from the target's arithmetic-instruction throughputs. A PTX
// instruction is not one SASS instruction: conversions, MUFU ops (rsqrt, ex2, ...), FP64 and
// 64-bit integer arithmetic run at a fraction of the FP32 rate, and integer division becomes a
// sequence of ~20 instructions. The table and its sources are in issue_cost.cpp.
#pragma once

#include <cstdint>

#include "runtime/cuda/virtual/program.h"

namespace kiln::cuda::vgpu {

struct OpcodeParts;

// Compute capabilities the table has a column for.
enum class CostArch : std::uint8_t { sm90, sm80 };

// Costs are in quarters of an issue slot; a slot is one thread-instruction at an SM's issue rate
// (4 schedulers x 32 lanes = 128 per clock on cc 8.0 and 9.0). An FP32 FMA on cc 9.0 (128 per
// SM per clock) is 4 quarters; a MUFU op (16 per clock) 32.
inline constexpr unsigned kCostQuarters = 4;

// The cost of `in` (decoded from `info`) on `arch`, in quarter slots.
std::uint16_t issue_cost(const OpcodeParts& info, const Instr& in, CostArch arch = CostArch::sm90);

}  // namespace kiln::cuda::vgpu
