// Drawing from categorical distributions on the device: multinomial (from Philox, as every kiln
// draw), and the next-token sampling of text generation (greedy, temperature, top-k, top-p) made
// of it, sort and topk. Each is a composite of primitive ops, so it traces and compiles.
#pragma once

#include "runtime/random.h"
#include "runtime/tensor.h"

namespace kiln {

// `num_samples` indices (i64) per row of `probs`, [V] or [B, V]: non-negative finite weights,
// not necessarily normalized, each row with a positive sum. With replacement each draw picks i
// with probability p_i / sum(p) (an inverse-CDF search of one uniform); without, the row's
// indices are drawn one after another without repeats (keys log(u)/p_i, the largest kept:
// Efraimidis-Spirakis), so a zero weight is never drawn and num_samples may not pass the row's
// positive weights. The weights are checked eagerly (reading three numbers back from a CUDA
// tensor, four without replacement); under tracing they are not, as torch.compile's. No
// gradient.
Tensor multinomial(const Tensor& probs, std::int64_t num_samples, bool replacement = false,
                   Generator* gen = nullptr);

// How sample_next chooses a token from logits.
struct SamplingOptions {
  double temperature = 1.0;  // the logits' divisor; 0 is greedy (argmax)
  std::int64_t top_k = 0;    // only the k most likely tokens (0: every token)
  double top_p = 1.0;        // only the most likely tokens whose mass before them is < top_p
};

// The next token of each row of `logits` ([V] gives [], [B, V] gives [B]; i64): argmax at
// temperature 0, else a draw from softmax(logits / temperature) restricted to top_k and top_p
// (Hugging Face's order: temperature, then top-k, then top-p; the most likely token is always
// kept).
Tensor sample_next(const Tensor& logits, const SamplingOptions& options = {},
                   Generator* gen = nullptr);

}  // namespace kiln
