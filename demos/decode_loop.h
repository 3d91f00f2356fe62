// The generation loop over any model's decode step (demos/gpt_decode.h, demos/zoo/
// llama_decode.h): prefill is one step over the prompts, then one step per new token, each drawn by
// sample_next from the last position's logits. Prompts of different lengths are left-padded to
// one length; each sequence's `starts` entry says where its own tokens begin.
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include "autograd/ops.h"
#include "autograd/sampling.h"

namespace kiln::demos {

// One call of the model over new tokens [B, T]: forward_cached, or a compiled function of it.
// `rows` (i64 [T]) are the cache rows the tokens are written to, the same for every sequence;
// `starts` (i64 [B]) each sequence's first live row. A token's position is its row - start.
using DecodeStep =
    std::function<Tensor(const Tensor& tokens, const Tensor& rows, const Tensor& starts)>;

// What a step's attention and embeddings read of its rows and starts: each token's position
// (row - start, 0 on the padding) [B, T], and each sequence's live cache length [B], the last
// row + 1 (cached_attention's `lengths`). Made on the rows' device, no host copy.
struct StepPositions {
  Tensor positions, lengths;
};
inline StepPositions step_positions(const Tensor& rows, const Tensor& starts) {
  const std::int64_t time = rows.shape()[0], batch = starts.shape()[0];
  Tensor positions = clamp_min(unsqueeze(rows, 0) - unsqueeze(starts, 1), 0);
  Tensor end = select(rows, 0, time - 1) + scalar_tensor(1, DType::i64);
  return {positions, expand(end, Shape{batch}).contiguous()};
}

// Prompts as one left-padded batch: tokens [B, T0], and starts [B], the padding before each.
struct Prompts {
  Tensor tokens, starts;
};

// `prompts` of any lengths (at least one token each), left-padded with `pad` to the longest.
inline Prompts left_padded(const std::vector<std::vector<std::int64_t>>& prompts, Device device,
                           std::int64_t pad = 0) {
  KILN_CHECK(!prompts.empty(), "left_padded: no prompts");
  std::size_t longest = 0;
  for (const auto& p : prompts) {
    KILN_CHECK(!p.empty(), "left_padded: an empty prompt");
    longest = std::max(longest, p.size());
  }
  std::vector<std::int64_t> tokens, starts;
  for (const auto& p : prompts) {
    starts.push_back(static_cast<std::int64_t>(longest - p.size()));
    tokens.insert(tokens.end(), longest - p.size(), pad);
    tokens.insert(tokens.end(), p.begin(), p.end());
  }
  const auto batch = static_cast<std::int64_t>(prompts.size());
  return {from_vector(tokens, {batch, static_cast<std::int64_t>(longest)}).to(device),
          from_vector(starts, {batch}).to(device)};
}

// The prompts, then `new_tokens` more, each drawn by sample_next from the last position's
// logits: prefill is one step over the prompts, decode one step per token. Returns
// [B, T0 + new_tokens], the padding included.
inline Tensor generate(const DecodeStep& step, const Prompts& prompts, std::int64_t new_tokens,
                       const SamplingOptions& options = {}, Generator* gen = nullptr) {
  NoGradGuard no_grad;
  const Device device = prompts.tokens.device();
  const std::int64_t prompt_len = prompts.tokens.shape()[1];
  Tensor logits = step(prompts.tokens, arange(prompt_len).to(device), prompts.starts);
  std::vector<Tensor> sequence{prompts.tokens};
  for (std::int64_t n = 0; n < new_tokens; ++n) {
    Tensor last = select(logits, 1, logits.shape()[1] - 1);  // [B, vocab]
    Tensor next = unsqueeze(sample_next(last, options, gen), 1);
    sequence.push_back(next);
    if (n + 1 == new_tokens) break;
    Tensor row = from_vector<std::int64_t>({prompt_len + n}, {1}).to(device);
    logits = step(next, row, prompts.starts);
  }
  return cat(sequence, 1);
}

// Prompts of one length `prompt` [B, T0] (i64, on the model's device): no padding.
inline Tensor generate(const DecodeStep& step, const Tensor& prompt, std::int64_t new_tokens,
                       const SamplingOptions& options = {}, Generator* gen = nullptr) {
  Prompts prompts{prompt, zeros({prompt.shape()[0]}, DType::i64, prompt.device())};
  return generate(step, prompts, new_tokens, options, gen);
}

}  // namespace kiln::demos
