// Where the attention ops' optional inputs sit (runtime/ops.def): after the fixed ones (q, k, v;
// the backward adds out, lse, dout) an optional mask, then, when attrs.dropout > 0, the seed and
// offset of the probabilities' dropout draw. Every reader of the ops asks here, so the layout is
// written once.
#pragma once

#include <cstddef>
#include <optional>

#include "runtime/op.h"

namespace kiln {

struct AttentionInputs {
  std::size_t fixed = 3;            // q, k, v (attention) or q, k, v, out, lse, dout
  std::optional<std::size_t> mask;  // the mask's position
  std::optional<std::size_t> seed;  // the dropout seed's; the offset follows it
};

// The layout of `count` inputs of `op` (attention or attention_backward) with `attrs`; kiln::Error
// naming the op when the count fits neither form.
AttentionInputs attention_inputs(OpId op, std::size_t count, const OpAttrs& attrs);

// The dropout rate's keep test and scale as the dropout composite computes them in `dtype` (the
// accumulation dtype, f32 or f64): a probability is kept when its uniform is at least
// `threshold`, then multiplied by `scale` (1 / (1 - p) rounded to the dtype).
struct AttentionDropout {
  double threshold = 0, scale = 1;
};
AttentionDropout attention_dropout(double p, DType dtype);

}  // namespace kiln
