// Combo kernels: several independent pointwise kernels of a plan (each with an element function
// alone, PointwiseKernel::element_source) rendered from templates/pointwise_combo.cu.mustache
// into ONE kernel and launched once, each member over a range of the grid's blocks with its own
// dtypes and element count (as PyTorch Inductor's combo kernels do for small pointwise work).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/pointwise.h"

namespace kiln::jit::codegen {

// Members per combo kernel at most, and pointers (reads + writes) over all of them: the launch's
// parameters stay far below CUDA's 4 KiB and the member branches few.
inline constexpr std::size_t kMaxComboMembers = 16;
inline constexpr std::size_t kMaxComboPointers = 64;

// Elements a member may have at the traced sizes: past them a kernel's own launch (its vector
// path, its launch split past 2^31 elements) is worth more than the launch a combo saves.
inline constexpr std::int64_t kMaxComboMemberElements = std::int64_t{1} << 20;

struct ComboKernel {
  std::string name;
  KernelHandle handle;
  // Per member: the values it reads and writes, in its element function's parameter order.
  std::vector<std::vector<int>> reads, writes;
};

// Renders `members` (each with an element_source) as one kernel.
ComboKernel render_combo(const graph::Graph& graph,
                         std::span<const PointwiseKernel* const> members);

// Launches `combo` once over each member's domain (`domains`, at this call's sizes) and returns
// per member the values it writes as contiguous CUDA tensors (in `into`'s buffers, by position
// among all members' writes in order, where it has them). Returns nothing (launching
// nothing) where a member reads a tensor that is not contiguous CUDA memory of its domain's
// elements or has 2^31 elements or more: the caller then runs the members one by one.
std::optional<std::vector<std::vector<Tensor>>> run_combo(const graph::Graph& graph,
                                                          const ComboKernel& combo,
                                                          std::span<const Shape> domains,
                                                          const std::vector<Tensor>& values,
                                                          OutputBuffers into = {});

}  // namespace kiln::jit::codegen
