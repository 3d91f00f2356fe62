// The attention rewrite: scaled dot-product attention as users write it, traced into primitive
// ops, becomes one `attention` node (runtime/ops.def), so that it runs as one kernel whose
// scores never reach memory. The patterns follow Inductor's fuse_attention:
//
//   matmul(q, kᵀ) [· or / a constant] [masked: where(mask, -inf, ·) | where(keep, ·, -inf) |
//   + additive mask] [cast to f32] softmax(-1) [cast back] matmul(·, v)
//
// where kᵀ is a transpose of k (any other right operand is transposed back by a view) and a
// constant factor on q instead of the scores is left on q. Every intermediate value must be
// read by the next step only. Not rewritten, with the reason on KILN_LOG=fusion (near misses):
// a softmax over another dim, anything between the softmax and the second matmul (dropout), the
// scores read elsewhere, a fill value other than -inf, a factor that is not a constant, a scale
// after an additive mask.
//
// An inexact pass (graph/pipeline.h), off with KILN_ATTENTION_REWRITE=0: the fused op rounds
// differently from the primitives (results agree to rounding, not bit for bit), and a fully
// masked row gives 0 where softmax gives NaN.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"

namespace kiln::graph {

struct AttentionRewrite {
  std::string pattern;  // the steps matched, "matmul*scale.where.softmax.matmul"
  int value = -1;       // the attention node's value
};
struct AttentionNearMiss {
  int softmax = -1;  // the softmax node (index before rewriting)
  std::string why;
};
struct AttentionRewriteReport {
  std::vector<AttentionRewrite> rewrites;
  std::vector<AttentionNearMiss> near_misses;
};

// Rewrites every match in `g`, leaving the primitives it replaced dead for the pipeline to remove
// (graph/pipeline.h); each rewrite and near miss is logged under KILN_LOG=fusion.
AttentionRewriteReport rewrite_attention(Graph& g);

}  // namespace kiln::graph
