// The attention rewrite: scaled dot-product attention as users write it, traced into primitive
// ops, becomes one `attention` node (runtime/ops.def), so that it runs as one kernel whose
// scores never reach memory. The patterns follow Inductor's fuse_attention:
//
//   matmul(q, kᵀ) [· or / a constant] [masked: where(mask, -inf, ·) | where(keep, ·, -inf) |
//   + additive mask] [cast to f32] softmax(-1) [dropout] [cast back] matmul(·, v)
//
// where kᵀ is a transpose of k (any other right operand is transposed back by a view) and a
// constant factor on q instead of the scores is left on q. Grouped-query attention's repetition
// of k and v over the query heads (reshape(expand(unsqueeze(k))), or index_select on the head
// dim with a constant index h / g) is undone: the op takes k and v with Hkv heads and its kernels
// read each in place. On a CUDA graph the fused kernels are asked first (AttentionKernels): a
// call they would refuse is a near miss, its primitives kept. Every intermediate value must be
// read by the next step only. Not rewritten, with the reason on KILN_LOG=fusion (near misses):
// a softmax over another dim, anything between the softmax and the second matmul other than
// dropout (as the dropout composite traces it: its draw becomes the op's seed and offset, so the
// kernels drop the same probabilities in registers), the scores read elsewhere, a fill value other
// than -inf (or the scores' dtype's lowest finite value, torch.finfo(dtype).min), a factor that is
// not a constant, a scale after an additive mask.
//
// An inexact pass (graph/pipeline.h), off with KILN_ATTENTION_REWRITE=0: the fused op rounds
// differently from the primitives (results agree to rounding, not bit for bit), and a fully
// masked row gives 0 where softmax gives NaN (a -inf fill) or the mean of v (a finite fill).
#pragma once

#include <optional>
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

// One attention call as the rewrite would make it: the operands' shapes and dtypes (k and v
// already un-repeated for grouped-query attention), the mask's, the scale and the causal flag.
struct AttentionSignature {
  Shape q, k, v;
  DType q_dtype = DType::f32, k_dtype = DType::f32, v_dtype = DType::f32;
  std::optional<Shape> mask;
  std::optional<DType> mask_dtype;
  double scale = 1.0;
  bool causal = false;
};

// What the fused attention kernels take, asked per match on a CUDA graph before rewriting.
// graph/ declares it and jit/ provides it (jit/codegen/attention.cpp registers it when the jit
// library loads), mirroring KernelCoverage (graph/fusion.h): a call the kernels would refuse
// keeps the user's primitive ops, which fuse as usual, rather than becoming an op the backend
// runs as a dozen eager launches the fuser never sees.
class AttentionKernels {
 public:
  virtual ~AttentionKernels() = default;
  // Why the kernels cannot take the call, naming the shapes and dtypes; nullopt when they can.
  virtual std::optional<std::string> refusal(const AttentionSignature& call) const = 0;
};
// The kernels the rewrite asks, or null (every match is rewritten: graph-only builds, CPU).
void set_attention_kernels(const AttentionKernels* kernels);
const AttentionKernels* attention_kernels();

// Rewrites every match in `g`, leaving the primitives it replaced dead for the pipeline to remove
// (graph/pipeline.h); each rewrite and near miss is logged under KILN_LOG=fusion.
AttentionRewriteReport rewrite_attention(Graph& g);

}  // namespace kiln::graph
