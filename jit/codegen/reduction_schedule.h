// How a row-reduction kernel runs one call: a pure function from the kernel, the call's sizes,
// strides and addresses, the device and the limits (schedule_limits.h) to a ReductionSchedule
// value: which form folds a row (a block, a warp, or the outer schedule's lanes), how its columns
// are addressed (the layout), the block, the grid and how many blocks a row is split over. The
// form and layout name the variant a launch runs, each a kernel of its own rendered when first
// needed (reduction.h); the rest are launch arguments.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "jit/codegen/pointwise_layout.h"
#include "jit/codegen/schedule_limits.h"

namespace kiln::jit::codegen {

struct ReductionKernel;

// What folds a row: a block (a shared-memory tree), a warp (shuffles only; rows of at most
// kWarpRowMaxCols columns), or, for reductions over outer dims, lanes that each fold a
// neighbouring row (outer), `outer_width` neighbouring rows a lane with 16-byte accesses
// (outer_vector).
enum class ReductionForm { block_per_row, warp_per_row, outer, outer_vector };

// The compile-time part of a schedule: one kernel source per form and layout (the outer forms
// address columns their own way and take no layout).
struct ReductionVariant {
  ReductionForm form = ReductionForm::block_per_row;
  ReductionLayout layout = ReductionLayout::generic;
  int index() const;  // in [0, kReductionVariants)
  static ReductionVariant from_index(int index);
  std::string str() const;
};
inline constexpr int kReductionVariants = 8;

// Rows this short are folded by one warp each, 8 rows to a block: a block per row would pay a
// shared-memory exchange, barriers and its per-row index arithmetic over a few columns a thread,
// where a warp's lanes fold up to 32 columns each between two shuffle trees (a transformer's
// 1024-wide rows: an issue cost per element under the DRAM time, bench_codegen's roofline).
inline constexpr std::int64_t kWarpRowMaxCols = 1024;
// Threads of a warp-per-row block: 8 rows at a time (4 warps of two 16-lane rows at most).
inline constexpr unsigned kWarpRowBlock = 256;
// Rows of the outer schedule's block; its x is one warp of neighbouring rows.
inline constexpr unsigned kOuterBlockY = 8;

// A call as the schedule sees it. `read_strides` holds a row of domain strides per read (one
// row of zeros where there is none), `out_strides` the outputs' (contiguous over the domain).
struct ReductionGeometry {
  std::span<const std::int64_t> domain;
  std::span<const int> kept, reduced;
  long long rows = 1, cols = 1;
  std::span<const long long> read_strides, out_strides;
  std::span<const TensorAccess> reads, writes;  // where each tensor starts, its element size
};

struct ReductionSchedule {
  ReductionVariant variant;
  unsigned grid_x = 1, grid_y = 1, block_x = 1, block_y = 1;
  long long splits = 1;      // blocks a row is split over (two deterministic stages)
  long long chunk_cols = 0;  // columns of a split row's chunk: whole vectors, the last shorter
  bool on_chip = false;      // the row fits the form's register caches (read once a row)
  std::string str() const;   // "warp_per_row/vector, grid 13 x 1, block 256 x 1"
};

// The schedule of one call. With `why`, the reason for each choice is appended, a line each (a
// warm launch passes none: no strings on its path).
ReductionSchedule schedule_reduction(const ReductionKernel& kernel, const ReductionGeometry& call,
                                     long long sm_count, const ScheduleLimits& limits,
                                     std::vector<std::string>* why = nullptr);

// The variant a call at the traced sizes with contiguous, aligned tensors takes: what a plan
// compiles ahead of its first call.
ReductionVariant expected_variant(const ReductionKernel& kernel, const ScheduleLimits& limits);

// Lanes a row of the warp schedule takes for `cols` traced columns whose widest element has
// `widest` bytes: 16 (two rows a warp) where 16-bit columns are traced wider than 512, so that
// each lane's share of a row's fixed cost is spread over 64 columns; else 32.
int warp_row_lanes(std::int64_t cols, std::size_t widest);
// Threads per block for rows of `cols` columns.
unsigned reduction_block(long long cols);
// Blocks each row is split over: 1 when there are rows enough for every SM, else enough that
// each thread still folds 32 columns or more, up to a block per SM.
long long split_count(long long rows, long long cols, unsigned block, long long sm_count);

}  // namespace kiln::jit::codegen
