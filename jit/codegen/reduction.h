// Row-reduction kernels: a FusionGroup of kind reduction or normalization (reductions over the
// same rows with their elementwise prologues and epilogues, softmax and log_softmax, epilogues
// that read a reduced value back over its row) rendered from templates/reduction.cu into one
// kernel. A block reduces a row in passes, one per chain of dependent reductions (LayerNorm's
// mean, then its variance). Values several passes read stay in registers while the row fits
// (the persistent schedule); a longer row's tail is re-read from memory in each pass.
#pragma once

#include <array>
#include <span>
#include <vector>

#include "graph/fusion.h"
#include "graph/graph.h"
#include "jit/codegen/kernel_cache.h"

namespace kiln::jit::codegen {

struct ReductionKernel {
  struct Read {
    int value = -1;
    std::vector<int> frame_dims;  // the domain dims the value's shape aligns with
    int passes = 0;               // loops over the row that load it (for traffic counts)
    bool on_chip = false;         // loaded once into registers while the row fits (items)
  };
  std::string name;
  std::string source;
  std::vector<int> host_views;   // view nodes applied on the host to the kernel's inputs first
  std::vector<Read> reads;       // tensors read, in parameter order
  std::vector<int> scalars;      // numbers passed by value, after the reads
  std::vector<int> writes;       // values written, after the numbers
  std::vector<bool> write_full;  // per write: over the whole domain (else one per row)
  std::vector<std::int64_t> reduce_dims;
  int passes = 0;  // loops over each row
  int items = 0;   // columns per thread kept in registers across passes; 0: none (looped)
  bool checks_index = false;  // a row select: the kernel takes an error flag (IndexError)
  // One pass of plain reductions: a row may be split over blocks (two deterministic stages),
  // which exchange `partial_slots` 8-byte partials per chunk.
  bool splittable = false;
  int partial_slots = 0;
  // The outer schedule (templates/reduction_outer.cu) of a splittable kernel whose innermost
  // domain dim is kept; empty when it does not apply. Launched when the reads are contiguous
  // along that dim, where the row schedule's lanes would each read a different sector.
  std::string outer_source;
  // The same rows a warp each (no shared memory, no barrier), for rows of at most
  // kWarpRowMaxCols columns; `warp_items` sizes its register caches as `items` does the block's.
  std::string warp_source;
  int warp_items = 0;
  std::int64_t traced_cols = 0;  // the row length the kernel was traced with
};

// Rows this short are folded by one warp each, 8 rows to a block: a block per row would leave
// most of its threads idle and pay a shared-memory exchange and barriers for every reduction.
inline constexpr std::int64_t kWarpRowMaxCols = 256;

// Which of a kernel's sources a launch runs.
enum class ReductionSchedule { block_per_row, warp_per_row, outer };
// A kernel's resolved functions (a plan's), indexed by ReductionSchedule; an empty one is looked
// up by its code at each launch.
using ReductionHandles = std::array<KernelHandle, 3>;
// The schedule for `cols` columns over `rows` rows, `splits` blocks a row (block per row only).
ReductionSchedule row_schedule(const ReductionKernel& k, long long cols, long long splits);
const std::string& schedule_source(const ReductionKernel& k, ReductionSchedule schedule);
// The schedule, and its source, that a launch at the traced sizes with contiguous inputs runs
// (what a plan compiles ahead of its first call).
ReductionSchedule expected_schedule(const ReductionKernel& k);
const std::string& expected_source(const ReductionKernel& k);

// Columns per thread a persistent row keeps in registers at most: beyond items * 1024 columns
// the rest of the row is re-read from memory in each pass.
inline constexpr int kMaxRowItems = 8;
// Threads per block for rows of `cols` columns.
unsigned reduction_block(long long cols);
// Blocks each row is split over: 1 when there are rows enough for every SM, else enough that
// each thread still folds 8 columns or more, up to 4 blocks per SM.
long long split_count(long long rows, long long cols, unsigned block, long long sm_count);

// Renders `group`, which the fuser formed from nodes the generator covers (graph::KernelCoverage);
// a kiln::Error naming the node is an internal error.
ReductionKernel render_reduction(const graph::Graph& graph, const graph::FusionGroup& group);

// Runs `kernel` over `domain` (the group's domain at this call's sizes); `values` as for
// run_pointwise. Returns the written values in `kernel.writes` order.
std::vector<Tensor> run_reduction(const graph::Graph& graph, const ReductionKernel& kernel,
                                  const Shape& domain, std::vector<Tensor>& values,
                                  std::span<const std::int64_t> symbol_values = {},
                                  const ReductionHandles* handles = nullptr);

}  // namespace kiln::jit::codegen
