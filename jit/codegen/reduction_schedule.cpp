// Choosing a row reduction's schedule per call (see reduction_schedule.h).
#include "jit/codegen/reduction_schedule.h"

#include <fmt/format.h>

#include <algorithm>

#include "jit/codegen/launch_stats.h"
#include "jit/codegen/reduction.h"

namespace kiln::jit::codegen {

static_assert(std::tuple_size_v<decltype(LaunchStats::reduction_variants)> == kReductionVariants);

namespace {

const char* form_name(ReductionForm form) {
  switch (form) {
    case ReductionForm::block_per_row:
      return "block_per_row";
    case ReductionForm::warp_per_row:
      return "warp_per_row";
    case ReductionForm::outer:
      return "outer";
    case ReductionForm::outer_vector:
      break;
  }
  return "outer_vector";
}

const char* layout_name(ReductionLayout layout) {
  switch (layout) {
    case ReductionLayout::generic:
      return "generic";
    case ReductionLayout::flat:
      return "flat";
    case ReductionLayout::vector:
      break;
  }
  return "vector";
}

// Appends a reason when the caller asked for them.
template <typename... Args>
void note(std::vector<std::string>* why, fmt::format_string<Args...> text, Args&&... args) {
  if (why) why->push_back(fmt::format(text, std::forward<Args>(args)...));
}

// The outer schedule when the kernel has one, its rows are wide enough to fill a sector
// (8 elements), and no read is contiguous along the reduced dims instead (a transposed view:
// the row schedule's lanes read that one side by side).
bool use_outer_schedule(const ReductionKernel& kernel, const ReductionGeometry& call,
                        const ScheduleLimits& limits, std::vector<std::string>* why) {
  if (!kernel.outer || !limits.outer_rows || call.kept.empty() || call.reduced.empty())
    return false;
  if (call.domain[call.kept.back()] < 8) {
    note(why, "rows: the innermost kept dim ({}) is narrower than a sector: a row each",
         call.domain[call.kept.back()]);
    return false;
  }
  bool side_by_side = false;
  const std::size_t rank = call.domain.size();
  for (std::size_t at = 0; at + rank <= call.read_strides.size(); at += rank) {
    const long long* s = call.read_strides.data() + at;
    if (s[call.reduced.back()] == 1) {
      note(why, "rows: a read is contiguous along the reduced dims: a row each");
      return false;
    }
    side_by_side = side_by_side || s[call.kept.back()] == 1;
  }
  if (side_by_side) note(why, "outer: reads are contiguous along the kept dim: rows side by side");
  return side_by_side;
}

// Whether the outer schedule may take `width` neighbouring rows a lane (its vector form): every
// read steps 1 along the innermost kept dim, whose size the width divides, its other strides are
// multiples of the width and its base is 16-byte aligned.
bool outer_vectors_fit(const ReductionKernel& kernel, const ReductionGeometry& call) {
  const long long width = kernel.outer_width;
  const int inner = call.kept.back();
  if (!kernel.outer_vector || width < 2 || call.domain[inner] % width != 0) return false;
  const std::size_t rank = call.domain.size();
  for (std::size_t i = 0; i < call.reads.size(); ++i) {
    const long long* s = call.read_strides.data() + i * rank;
    if (s[inner] != 1) return false;
    for (std::size_t d = 0; d < rank; ++d)
      if (static_cast<int>(d) != inner && call.domain[d] != 1 && s[d] % width != 0) return false;
    if (call.reads[i].address % 16 != 0) return false;
  }
  return true;
}

// Whether `strides` step through the reduced dims as one contiguous run (innermost stride 1).
bool contiguous_over(const ReductionGeometry& call, const long long* strides) {
  long long expected = 1;
  for (auto d = call.reduced.rbegin(); d != call.reduced.rend(); ++d) {
    if (call.domain[*d] != 1 && strides[*d] != expected) return false;
    expected *= call.domain[*d];
  }
  return true;
}

// Whether the row bases are one 32 x 32 -> 64-bit multiply (mul.wide.s32): the row count and
// every row-wide tensor's kept strides fit.
bool row_bases_fit(const ReductionKernel& kernel, const ReductionGeometry& call, long long limit) {
  auto wide_stride = [&](const long long* s) {
    for (int d : call.kept)
      if (s[d] > limit || s[d] < -limit) return true;
    return false;
  };
  if (call.rows > limit || wide_stride(call.out_strides.data())) return false;
  const std::size_t rank = call.domain.size();
  for (std::size_t i = 0; i < kernel.reads.size(); ++i)
    if (kernel.reads[i].frame_dims.size() == rank &&
        wide_stride(call.read_strides.data() + i * rank))
      return false;
  return true;
}

struct LayoutScratch {
  IterSpace rows_by_cols;
  std::vector<TensorAccess> reads, writes;
};

// The layout of a row-schedule launch (ReductionLayout).
ReductionLayout choose_layout(const ReductionKernel& kernel, const ReductionGeometry& call,
                              const ScheduleLimits& limits, std::vector<std::string>* why) {
  const ReductionLayout most = limits.reduction_layout;
  const long long limit = limits.reduction_index_limit;
  if (most == ReductionLayout::generic) {
    note(why, "layout generic: the limits allow no other");
    return ReductionLayout::generic;
  }
  if (call.reduced.empty() || call.cols > limit || !row_bases_fit(kernel, call, limit)) {
    note(why, "layout generic: a row, the row count or a row stride passes 32-bit indices");
    return ReductionLayout::generic;
  }
  const std::size_t rank = call.domain.size();
  // plan_vectors' view: the kept dims, then the row as one dim. The vectors are the thread's,
  // kept between launches, so a warm launch allocates none.
  thread_local LayoutScratch scratch;
  IterSpace& rows_by_cols = scratch.rows_by_cols;
  std::vector<TensorAccess>&reads = scratch.reads, &writes = scratch.writes;
  rows_by_cols.sizes.clear();
  reads.clear();
  writes.clear();
  for (int d : call.kept) rows_by_cols.sizes.push_back(call.domain[d]);
  rows_by_cols.sizes.push_back(call.cols);
  std::size_t full_reads = 0;
  for (const auto& r : kernel.reads) full_reads += r.frame_dims.size() == rank;
  rows_by_cols.strides.resize(full_reads);
  for (std::size_t i = 0; i < kernel.reads.size(); ++i) {
    if (kernel.reads[i].frame_dims.size() != rank) continue;  // read once per row
    const long long* s = call.read_strides.data() + i * rank;
    if (!contiguous_over(call, s)) {
      note(why, "layout generic: read {} does not store its rows contiguously", i);
      return ReductionLayout::generic;
    }
    auto& strides = rows_by_cols.strides[reads.size()];
    strides.clear();
    for (int d : call.kept) strides.push_back(s[d]);
    strides.push_back(1);
    reads.push_back(call.reads[i]);
  }
  for (std::size_t i = 0; i < call.writes.size(); ++i) {
    if (!kernel.write_full[i]) continue;
    if (!contiguous_over(call, call.out_strides.data())) {
      note(why, "layout generic: output {} does not store its rows contiguously", i);
      return ReductionLayout::generic;
    }
    writes.push_back(call.writes[i]);
  }
  if (most == ReductionLayout::flat || kernel.vector < 2 || call.cols % kernel.vector != 0) {
    note(why, "layout flat: rows contiguous; {}",
         most == ReductionLayout::flat ? "the limits allow no vectors"
                                       : "whole vectors do not fill the row");
    return ReductionLayout::flat;
  }
  // The pointwise path's check over [kept..., cols]: every read contiguous along the row and
  // aligned for a vector, its row strides multiples of the width; every write aligned.
  if (plan_vectors(rows_by_cols, kernel.vector, reads, writes) > 0) {
    note(why, "layout vector: rows contiguous and aligned, {} columns an access", kernel.vector);
    return ReductionLayout::vector;
  }
  note(why, "layout flat: rows contiguous, but a tensor is not aligned for vectors");
  return ReductionLayout::flat;
}

// The grid and block of each form.
void place(ReductionSchedule& s, const ReductionKernel& kernel, const ReductionGeometry& call,
           long long row_blocks, unsigned block, long long sm_count) {
  switch (s.variant.form) {
    case ReductionForm::outer:
    case ReductionForm::outer_vector:
      s.grid_x = static_cast<unsigned>(row_blocks);
      s.grid_y = static_cast<unsigned>(s.splits);
      s.block_x = 32, s.block_y = block;
      return;
    case ReductionForm::warp_per_row: {
      const long long block_rows = kWarpRowBlock / kernel.warp_lanes;
      s.grid_x = static_cast<unsigned>(
          std::min<long long>((call.rows + block_rows - 1) / block_rows, sm_count * 16));
      s.block_x = kWarpRowBlock;
      return;
    }
    case ReductionForm::block_per_row:
      break;
  }
  s.grid_x = static_cast<unsigned>(std::min<long long>(call.rows, sm_count * 16));
  s.grid_y = static_cast<unsigned>(s.splits);
  s.block_x = block;
}

}  // namespace

int ReductionVariant::index() const {
  switch (form) {
    case ReductionForm::block_per_row:
      return static_cast<int>(layout);
    case ReductionForm::warp_per_row:
      return 3 + static_cast<int>(layout);
    case ReductionForm::outer:
      return 6;
    case ReductionForm::outer_vector:
      break;
  }
  return 7;
}

ReductionVariant ReductionVariant::from_index(int index) {
  if (index == 7) return {ReductionForm::outer_vector, ReductionLayout::generic};
  if (index == 6) return {ReductionForm::outer, ReductionLayout::generic};
  return {index < 3 ? ReductionForm::block_per_row : ReductionForm::warp_per_row,
          static_cast<ReductionLayout>(index % 3)};
}

std::string ReductionVariant::str() const {
  if (form == ReductionForm::outer || form == ReductionForm::outer_vector) return form_name(form);
  return fmt::format("{}/{}", form_name(form), layout_name(layout));
}

std::string ReductionSchedule::str() const {
  return fmt::format("{}, grid {} x {}, block {} x {}{}", variant.str(), grid_x, grid_y, block_x,
                     block_y, splits > 1 ? fmt::format(", rows split in {}", splits) : "");
}

int warp_row_lanes(std::int64_t cols, std::size_t widest) {
  return widest <= 2 && cols > 512 ? 16 : 32;
}

unsigned reduction_block(long long cols) {
  return cols <= 32     ? 32
         : cols <= 64   ? 64
         : cols <= 128  ? 128
         : cols <= 2048 ? 256
         : cols <= 4096 ? 512
                        : 1024;
}

long long split_count(long long rows, long long cols, unsigned block, long long sm_count) {
  if (rows >= sm_count) return 1;  // enough rows to fill the device
  // >= 32 columns per thread: a chunk's block tree, second stage and index arithmetic are paid
  // per thread (~150 issue slots: at 16 bf16 columns, more than the columns' own work).
  long long by_work = cols / (static_cast<long long>(block) * 32);
  // One wave, a block per SM: more blocks would pay those again for no more bandwidth.
  long long by_device = (sm_count + rows - 1) / std::max(1LL, rows);
  return std::max(1LL, std::min(by_work, by_device));
}

ReductionSchedule schedule_reduction(const ReductionKernel& kernel, const ReductionGeometry& call,
                                     long long sm_count, const ScheduleLimits& limits,
                                     std::vector<std::string>* why) {
  ReductionSchedule s;
  const bool outer = use_outer_schedule(kernel, call, limits, why);
  const bool outer_vector = outer && limits.reduction_layout == ReductionLayout::vector &&
                            outer_vectors_fit(kernel, call);
  if (outer_vector)
    note(why, "outer_vector: {} neighbouring rows a lane, 16 bytes an access", kernel.outer_width);
  const long long lane_rows = outer_vector ? kernel.outer_width : 1;
  const unsigned block = outer ? kOuterBlockY : reduction_block(call.cols);
  const long long row_blocks = outer ? (call.rows / lane_rows + 31) / 32 : call.rows;
  // Few long rows (a full reduction is one) split over blocks: each folds a chunk of columns,
  // the last to arrive combines the chunks' partials in order.
  s.splits = kernel.splittable ? split_count(row_blocks, call.cols, block, sm_count) : 1;
  if (s.splits > 1)
    note(why, "split: {} row blocks for {} SMs: each row over {} blocks", row_blocks, sm_count,
         s.splits);
  if (outer) {
    s.variant.form = outer_vector ? ReductionForm::outer_vector : ReductionForm::outer;
  } else if (s.splits == 1 && call.cols <= kWarpRowMaxCols && limits.warp_rows) {
    s.variant.form = ReductionForm::warp_per_row;
    note(why, "warp_per_row: {} columns, {} lanes a row", call.cols, kernel.warp_lanes);
  } else {
    s.variant.form = ReductionForm::block_per_row;
    note(why, "block_per_row: {} columns, {} threads a row", call.cols, block);
  }
  if (!outer) s.variant.layout = choose_layout(kernel, call, limits, why);
  const long long grain = s.variant.layout == ReductionLayout::vector ? kernel.vector : 1;
  s.chunk_cols = (call.cols / grain + s.splits - 1) / s.splits * grain;
  s.on_chip = s.variant.form == ReductionForm::warp_per_row
                  ? call.cols <= static_cast<long long>(kernel.warp_items) * kernel.warp_lanes
                  : call.cols <= static_cast<long long>(kernel.items) * block;
  place(s, kernel, call, row_blocks, block, sm_count);
  return s;
}

ReductionVariant expected_variant(const ReductionKernel& k, const ScheduleLimits& limits) {
  if (k.outer && limits.outer_rows) {
    if (k.outer_vector_expected && limits.reduction_layout == ReductionLayout::vector)
      return {ReductionForm::outer_vector, ReductionLayout::generic};
    return {ReductionForm::outer, ReductionLayout::generic};
  }
  // Contiguous inputs at the traced sizes: the vector layout where whole vectors fill the row,
  // the generic one where rows are not the innermost dims or pass the 32-bit limit.
  ReductionLayout layout = !k.rows_innermost || k.traced_cols > limits.reduction_index_limit
                               ? ReductionLayout::generic
                           : k.vector > 1 && k.traced_cols % k.vector == 0 ? ReductionLayout::vector
                                                                           : ReductionLayout::flat;
  layout = std::min(layout, limits.reduction_layout);
  ReductionForm form = k.traced_cols <= kWarpRowMaxCols && limits.warp_rows
                           ? ReductionForm::warp_per_row
                           : ReductionForm::block_per_row;
  return {form, layout};
}

}  // namespace kiln::jit::codegen
