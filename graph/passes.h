// Graph-to-graph passes. graph/pipeline.h lists them, says which run on which graph and in what
// order, and removes what a pass left dead after each one: a pass only points uses elsewhere.
// All but transpose_matmul_results preserve the graph's results exactly (no reassociation, no
// precision change).
#pragma once

#include "graph/graph.h"

namespace kiln::graph {

// Removes nodes no output depends on, and non-argument inputs nothing reads.
void eliminate_dead_code(Graph& g);
// Merges nodes with the same op, inputs and attributes.
void eliminate_common_subexpressions(Graph& g);
// Evaluates nodes whose inputs are all constants (and whose sizes are static) at compile time.
void fold_constants(Graph& g);
// x*1, 1*x, x/1, x+0, 0+x, x-0 (when the result's shape and dtype equal x's), neg(neg(x)), casts
// to the same dtype, round trips through a wider dtype, reshapes to the same shape, reshape and
// permute chains, identity permutes and expands, pads of zero; expands that only elementwise
// readers broadcasting to the same size read.
void simplify(Graph& g);
// A tree of adds over zero pads that tile one dim (a backward gathering the gradients of slices
// of one tensor, such as q, k and v split from one projection): one cat of the padded values.
// Exact but for the sign of a zero (-0 + 0 is +0, a cat keeps -0).
void pads_to_cat(Graph& g);
// cat(reshape(x_i)) along the last dim, where each reshape merges x_i's trailing dims into it:
// reshape(cat(x_i)) along the first merged dim. A permuted x_i is then read where it lies
// instead of being copied to make the reshape a view.
void cat_before_reshape(Graph& g);

// permute(matmul(a, b)) swapping the last two dims, where nothing else reads the product, as
// matmul(bᵀ, aᵀ): the result comes out contiguous instead of as a transposed view (a weight's
// gradient that .grad would otherwise copy). Inexact: the library may order the product's sums
// differently, so results agree to rounding, not bit for bit. Leaves no dead node.
void transpose_matmul_results(Graph& g);

}  // namespace kiln::graph
