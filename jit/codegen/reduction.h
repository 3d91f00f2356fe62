// Row-reduction kernels: a FusionGroup of kind reduction or normalization (reductions over the
// same rows with their elementwise prologues and epilogues, softmax and log_softmax, epilogues
// that read a reduced value back over its row) rendered from templates/reduction.cu into one
// kernel. A block reduces a row in passes, one per chain of dependent reductions (LayerNorm's
// mean, then its variance). Values several passes read stay in registers while the row fits
// (the persistent schedule); a longer row's tail is re-read from memory in each pass.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "graph/fusion.h"
#include "graph/graph.h"
#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/kernel_variants.h"
#include "jit/codegen/output_buffers.h"
#include "jit/codegen/reduction_schedule.h"

namespace kiln::jit::codegen {

struct ReductionTemplateData;

// A reduction group lowered for code generation: what it reads and writes, its passes, its
// register caches and which schedules it supports. Each variant (reduction_schedule.h: a form and
// a layout) is a kernel of its own, rendered from the template data below when a launch first
// takes it, so a launch compiles and runs only the variant its schedule picks.
struct ReductionKernel {
  struct Read {
    int value = -1;
    std::vector<int> frame_dims;  // the domain dims the value's shape aligns with
    int passes = 0;               // loops over the row that load it (for traffic counts)
    bool on_chip = false;         // loaded once into registers while the row fits (items)
  };
  std::string name;
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
  // The outer schedule (templates/reduction_outer.cu): a splittable kernel whose innermost
  // domain dim is kept. Launched when the reads are contiguous along that dim, where the row
  // schedule's lanes would each read a different sector.
  bool outer = false;
  // Its vector form, `outer_width` neighbouring rows a lane, each reduced index one 16-byte
  // access per read; not where a row reads a value once per row. Launched when every read is
  // contiguous along the innermost kept dim and aligned for it.
  bool outer_vector = false;
  int outer_width = 1;
  bool outer_vector_expected = false;  // the traced innermost kept size is a multiple of it
  // The warp-per-row form: `warp_items` sizes its register caches as `items` does the block's,
  // over `warp_lanes` lanes a row (warp_row_lanes).
  int warp_items = 0;
  int warp_lanes = 32;
  std::int64_t traced_cols = 0;  // the row length the kernel was traced with
  // The reduced dims are the domain's innermost ones: contiguous inputs store each row
  // contiguously (the contiguous layouts apply); else a row steps over kept dims (generic).
  bool rows_innermost = false;
  // Columns per access of the vector layout (templates/reduction.cu's `layout`): 16 bytes of the
  // widest type a column loop moves, at most 8.
  int vector = 1;
  // What the variants are rendered from: the block-per-row form's data (also the outer
  // schedule's) and the warp-per-row form's.
  std::shared_ptr<const ReductionTemplateData> block_data, warp_data;
  KernelVariants variants;  // by ReductionVariant::index()
};

// Columns per thread a persistent row keeps in registers at most: beyond items * 1024 columns
// the rest of the row is re-read from memory in each pass.
inline constexpr int kMaxRowItems = 8;
// The same for a warp per row: 32 columns a lane (64 for 16 lanes a row), a whole row of the
// warp schedule (1024), so no pass re-reads or recomputes a tail (softmax would compute exp twice
// for half the row).
inline constexpr int kMaxWarpRowItems = 64;

// Renders `group`, which the fuser formed from nodes the generator covers (graph::KernelCoverage);
// a kiln::Error naming the node is an internal error. No variant is rendered yet.
ReductionKernel render_reduction(const graph::Graph& graph, const graph::FusionGroup& group);
// The source of one variant of `kernel`, and its handle (rendered on first use, then shared by
// every copy of the kernel).
std::string render_reduction_variant(const ReductionKernel& kernel, ReductionVariant variant);
const KernelHandle& reduction_variant_kernel(const ReductionKernel& kernel,
                                             ReductionVariant variant);

// Runs `kernel` over `domain` (the group's domain at this call's sizes) on the schedule
// schedule_reduction picks within this thread's limits; `values` as for run_pointwise. Returns
// the written values in `kernel.writes` order, in `into`'s buffers where it has them.
std::vector<Tensor> run_reduction(const graph::Graph& graph, const ReductionKernel& kernel,
                                  const Shape& domain, std::vector<Tensor>& values,
                                  std::span<const std::int64_t> symbol_values = {},
                                  OutputBuffers into = {});

}  // namespace kiln::jit::codegen
