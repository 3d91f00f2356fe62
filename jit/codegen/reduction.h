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
  // The block-per-row kernel in the generic layout; its flat and vector layouts follow (each
  // layout a kernel of its own: a launch compiles and runs only the one it takes).
  std::string source;
  std::array<std::string, 2> contiguous_sources;  // [0] flat, [1] vector
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
  // The outer schedule with `outer_width` neighbouring rows a lane, each reduced index one 16-byte
  // access per read; empty where a row reads a value once per row. Launched when every read is
  // contiguous along the innermost kept dim and aligned for it.
  std::string outer_vector_source;
  int outer_width = 1;
  bool outer_vector_expected = false;  // the traced innermost kept size is a multiple of it
  // The same rows a warp each (no shared memory, no barrier), for rows of at most
  // kWarpRowMaxCols columns; `warp_items` sizes its register caches as `items` does the block's.
  // `warp_lanes` lanes fold a row: 32, or 16 (two rows a warp) where 16-bit columns are traced
  // wider than 512, so that each lane's share of a row's fixed cost is spread over 64 columns.
  std::string warp_source;
  std::array<std::string, 2> warp_contiguous_sources;  // [0] flat, [1] vector
  int warp_items = 0;
  int warp_lanes = 32;
  std::int64_t traced_cols = 0;  // the row length the kernel was traced with
  // The reduced dims are the domain's innermost ones: contiguous inputs store each row
  // contiguously (the contiguous layouts apply); else a row steps over kept dims (generic).
  bool rows_innermost = false;
  // Columns per access of the vector layout (templates/reduction.cu's `layout`): 16 bytes of the
  // widest type a column loop moves, at most 8.
  int vector = 1;
};

// Rows this short are folded by one warp each, 8 rows to a block: a block per row would pay a
// shared-memory exchange, barriers and its per-row index arithmetic over a few columns a thread,
// where a warp's lanes fold up to 32 columns each between two shuffle trees (a transformer's
// 1024-wide rows: an issue cost per element under the DRAM time, bench_codegen's roofline).
inline constexpr std::int64_t kWarpRowMaxCols = 1024;

// Which of a kernel's sources a launch runs.
enum class ReductionSchedule { block_per_row, warp_per_row, outer, outer_vector };
// A kernel's sources, one per variant: the row schedules in each layout (ReductionLayout below),
// then the outer schedule's two forms.
inline constexpr int kReductionVariants = 8;
enum class ReductionLayout;
int reduction_variant(ReductionSchedule schedule, ReductionLayout layout);
// A kernel's resolved functions (a plan's), indexed by variant; an empty one is looked up by its
// code at each launch.
using ReductionHandles = std::array<KernelHandle, kReductionVariants>;
// The schedule for `cols` columns over `rows` rows, `splits` blocks a row (block per row only).
ReductionSchedule row_schedule(const ReductionKernel& k, long long cols, long long splits);
const std::string& variant_source(const ReductionKernel& k, int variant);
// The variant, and its source, that a launch at the traced sizes with contiguous, aligned inputs
// runs (what a plan compiles ahead of its first call).
int expected_variant(const ReductionKernel& k);
const std::string& expected_source(const ReductionKernel& k);

// Columns per thread a persistent row keeps in registers at most: beyond items * 1024 columns
// the rest of the row is re-read from memory in each pass.
inline constexpr int kMaxRowItems = 8;
// The same for a warp per row: 32 columns a lane (64 for 16 lanes a row), a whole row of the
// warp schedule (1024), so no pass re-reads or recomputes a tail (softmax would compute exp twice
// for half the row).
inline constexpr int kMaxWarpRowItems = 64;
// Lanes a row of the warp schedule takes for `cols` traced columns whose widest element has
// `widest` bytes (see ReductionKernel::warp_lanes).
int warp_row_lanes(std::int64_t cols, std::size_t widest);
// Threads per block for rows of `cols` columns.
unsigned reduction_block(long long cols);
// Blocks each row is split over: 1 when there are rows enough for every SM, else enough that
// each thread still folds 32 columns or more, up to a block per SM.
long long split_count(long long rows, long long cols, unsigned block, long long sm_count);

// How a launch addresses a row's columns (the kernels' `layout` argument): through the reduced
// dims' strides (generic); as row base + column in 32-bit arithmetic where every tensor a column
// loop touches stores the row contiguously, the row fits 32-bit indices and so do the row count
// and the row strides (the row base is one widening multiply) (flat); and, where
// also every row is aligned for it, `vector` columns a 16-byte access (vector).
enum class ReductionLayout { generic = 0, flat = 1, vector = 2 };
// The most a launch may take (vector by default), for tests and benchmarks comparing the fast
// layouts with the generic one on the same data; returns the previous setting.
ReductionLayout set_reduction_layout_limit(ReductionLayout most);
// The row length (and row count, and row stride) beyond which a launch takes the generic layout
// (2^31 less a block's stride). Tests lower it to take that path on tensors the virtual GPU can
// hold; returns the previous limit.
std::int64_t set_reduction_index_limit(std::int64_t limit);
// The layout this thread's last row-schedule launch took (tests check which path ran).
ReductionLayout last_reduction_layout();

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
