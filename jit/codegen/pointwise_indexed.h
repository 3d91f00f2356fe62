// Index-aware pointwise kernels: a pointwise group that moves data of values it computes (a cat,
// a pad, or a slice, permute or unit reshape of a value computed in the group) renders as one
// kernel that decomposes each element's linear index into coordinates and computes every value
// at the coordinates its readers map it to, as PyTorch Inductor's loop bodies do: a cat picks its
// input by range, a pad is a masked load, a slice shifts the coordinates its producer is
// computed at (cheap pointwise producers are recomputed where several maps read them).
#pragma once

#include <span>
#include <vector>

#include "graph/fusion.h"
#include "graph/graph.h"
#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/pointwise.h"

namespace kiln::jit::codegen {

// Whether view node `n` of a value computed in a kernel renders there as an index map: slice,
// permute, detach or reshape (by linear index), over sizes that are constants or tracked
// expressions (which the kernel takes as arguments).
bool renders_view_by_index(const graph::Graph& g, int n);

// Whether view node `n` reshapes an expanded view (grouped-query heads repeated for the query
// heads): a copy on the host, so an index-aware kernel reads the expanded tensor through it.
bool reshapes_expanded(const graph::Graph& g, int n);

// Whether `group` holds a cat or pad, a view of a value computed in the group, or a reshape of
// an expanded view: such a group
// renders through render_indexed.
bool is_indexed_group(const graph::Graph& g, const graph::FusionGroup& group);

// Renders `group` (kind pointwise, no size opaque); the kernel's `indexed` is set.
PointwiseKernel render_indexed(const graph::Graph& g, const graph::FusionGroup& group,
                               std::span<const std::int64_t> order = {});

// Runs an indexed kernel over `domain` (at this call's sizes: its symbolic sizes are evaluated
// from `symbol_values` into its size arguments); `values` as for run_pointwise.
std::vector<Tensor> run_indexed(const graph::Graph& g, const PointwiseKernel& kernel,
                                const Shape& domain, std::vector<Tensor>& values,
                                std::span<const std::int64_t> symbol_values,
                                const KernelHandle* handle, OutputBuffers into = {},
                                std::span<const std::int64_t> order = {});

}  // namespace kiln::jit::codegen
