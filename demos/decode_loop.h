// The generation loop over any model's decode step (demos/gpt_decode.h, demos/zoo/
// llama_decode.h): prefill is one step over the prompt, then one step per new token, each drawn by
// sample_next from the last position's logits.
#pragma once

#include <functional>
#include <vector>

#include "autograd/ops.h"
#include "autograd/sampling.h"

namespace kiln::demos {

// One call of the model over new tokens at their positions: forward_cached, or a compiled
// function of it.
using DecodeStep = std::function<Tensor(const Tensor& tokens, const Tensor& positions)>;

// `prompt` [B, T0] (i64, on the model's device), then `new_tokens` more, each drawn by
// sample_next from the last position's logits: prefill is one step over the prompt, decode one
// step per token. Returns [B, T0 + new_tokens].
inline Tensor generate(const DecodeStep& step, const Tensor& prompt, std::int64_t new_tokens,
                       const SamplingOptions& options = {}, Generator* gen = nullptr) {
  NoGradGuard no_grad;
  const Device device = prompt.device();
  const std::int64_t prompt_len = prompt.shape()[1];
  Tensor logits = step(prompt, arange(prompt_len).to(device));
  std::vector<Tensor> sequence{prompt};
  for (std::int64_t n = 0; n < new_tokens; ++n) {
    Tensor last = select(logits, 1, logits.shape()[1] - 1);  // [B, vocab]
    Tensor next = unsqueeze(sample_next(last, options, gen), 1);
    sequence.push_back(next);
    if (n + 1 == new_tokens) break;
    Tensor position = from_vector<std::int64_t>({prompt_len + n}, {1}).to(device);
    logits = step(next, position);
  }
  return cat(sequence, 1);
}

}  // namespace kiln::demos
