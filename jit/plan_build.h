// Building a KernelPlan's typed steps (plan_step.h) in named phases, each deciding one thing for
// the whole partition before any step exists:
//   render_kernels           the generated kernel of each pointwise/reduction group
//   place_attention_outputs  which attention steps write their outputs in place (and the cat
//                            each such backward makes)
//   plan_library_calls       which matmul groups become a skinny GEMM (few rows: a generated
//                            kernel) or one cuBLASLt call, what each absorbs, and the groups
//                            that must run right after one (BGRADB)
//   order_groups             the order the groups run in
//   plan_releases            what each step drops, and the plan's peak bytes
//   assemble_steps           the steps, each built once with all it needs
//   place_kernel_outputs     which pointwise kernels write their outputs in the layout of the
//                            permute that reads them (output_placement.cpp)
//   combine_kernels          independent pointwise kernels ready at one point as one combo
//                            launch (plan_combine.cpp)
// then, over the final steps, buffer assignment (buffer_assignment.h) and the capture blockers
// (plan_capture.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/fusion.h"
#include "graph/graph.h"
#include "jit/codegen/epilogue_lowering.h"
#include "jit/codegen/skinny_gemm.h"
#include "jit/plan_step.h"

namespace kiln::jit::plan_build {

struct LibraryCalls;

// Per group: its kernel, for the kinds a template renders (none for a group a skinny GEMM
// computes).
std::vector<std::optional<codegen::GroupKernel>> render_kernels(const graph::Graph& g,
                                                                const graph::Partition& p,
                                                                const LibraryCalls& library);

struct Placements {
  std::vector<std::optional<OutputPlacement>> of_group;  // per attention group
  std::vector<int> joined_value;  // per cat group a placed backward makes: the cat's output
};
Placements place_attention_outputs(const graph::Graph& g, const graph::Partition& p);

struct LibraryCalls {
  std::vector<std::optional<codegen::EpilogueLowering>> of_group;  // per matmul group
  std::vector<int> absorbed_by;  // per group: the matmul group whose call computes it, or -1
  // Per group: the matmul group it runs right after (a BGRADB sum the partition puts before
  // its matmul, and the host views of it), or -1.
  std::vector<int> runs_after;
  // Per matmul group: its skinny GEMM, chosen over cuBLASLt where it applies.
  std::vector<std::shared_ptr<const codegen::SkinnyGemm>> skinny_of_group;
  std::vector<int> skinny_absorbed_by;  // per group: the matmul group whose skinny GEMM computes it
  std::vector<std::string> log;  // KILN_LOG=fusion: what each matmul group became, and why
};
LibraryCalls plan_library_calls(const graph::Graph& g, const graph::Partition& p);

// The groups in the order they run: the partition's, with each `runs_after` group moved to
// just after its matmul.
std::vector<int> order_groups(const graph::Partition& p, const LibraryCalls& library);

struct Releases {
  std::vector<std::vector<int>> at;  // per position in `order`: the values dropped after it
  std::int64_t peak_bytes = 0, total_bytes = 0;
};
Releases plan_releases(const graph::Graph& g, const graph::Partition& p,
                       const std::vector<int>& order);

// The steps in `order`, taking the kernels out of `kernels`.
std::vector<PlanStep> assemble_steps(const graph::Graph& g, const graph::Partition& p,
                                     const std::vector<int>& order,
                                     std::vector<std::optional<codegen::GroupKernel>>& kernels,
                                     const Placements& placements, const LibraryCalls& library,
                                     Releases releases);

// Sets the walk order of each pointwise kernel step whose every output is read only by one
// permute (the same for all, the last dim kept): the kernel then writes them in that permute's
// layout, so it is contiguous and the reshape after it a view, not a copy kernel. An
// index-aware kernel is rendered again for its order. `log`
// (KILN_LOG=fusion) names them.
void place_kernel_outputs(const graph::Graph& g, const graph::Partition& p,
                          std::vector<PlanStep>& steps, std::vector<std::string>& log);

// `steps` with pointwise kernels that can run at the same point (none reads what another
// writes, each one's inputs ready there and its outputs read by no step before it) merged into
// combo steps; releases and library calls' absorbed positions follow. `log` (KILN_LOG=fusion)
// says which kernels were combined and which moved. KILN_COMBO=0 returns `steps` as they are.
std::vector<PlanStep> combine_kernels(const graph::Graph& g, std::vector<PlanStep> steps,
                                      std::vector<std::string>& log);

}  // namespace kiln::jit::plan_build
