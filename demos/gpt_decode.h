// Decoding with the demo GPT (demos/gpt_model.h) from a static KV cache: module buffers
// [B, heads, seq_len, head_dim] per layer, written in place at the new tokens' positions with
// index_copy_, and the positions as a device tensor, so a compiled step is traced once for the
// prompt's length and once for one token, never per position. Attention reads the whole cache
// with the positions after each query masked (the live-length attention kernel is to come).
#pragma once

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "autograd/sampling.h"
#include "demos/gpt_model.h"

namespace kiln::gpt {

// Keys and values of every layer for `batch` sequences of up to config.seq_len tokens.
class KvCache : public nn::Module {
 public:
  KvCache(const GptConfig& config, std::int64_t batch, Device device) {
    const std::int64_t head_dim = config.d_model / config.heads;
    keys.reserve(config.layers);  // the registered slots must not move
    values.reserve(config.layers);
    for (std::int64_t i = 0; i < config.layers; ++i) {
      keys.push_back(zeros({batch, config.heads, config.seq_len, head_dim}, DType::f32, device));
      values.push_back(zeros({batch, config.heads, config.seq_len, head_dim}, DType::f32, device));
      register_buffer("keys." + std::to_string(i), keys.back());
      register_buffer("values." + std::to_string(i), values.back());
    }
  }
  std::vector<Tensor> keys, values;
};

// Logits [B, T, vocab] of `tokens` [B, T] at `positions` (i64 [T] on the model's device), their
// keys and values written into `cache` first. In eval mode (no dropout).
inline Tensor forward_cached(const Gpt& model, const KvCache& cache, const Tensor& tokens,
                             const Tensor& positions) {
  KILN_CHECK(!model.is_training(), "gpt: decode in eval mode (model.eval())");
  const GptConfig& config = model.config();
  const std::int64_t batch = tokens.shape()[0], time = tokens.shape()[1];
  const std::int64_t d_model = config.d_model, heads = config.heads, head_dim = d_model / heads;
  Tensor x =
      model.token_embedding(tokens) + index_select(model.position_embedding.weight, 0, positions);
  // True where cache position j is after the query's position: not yet written, or stale.
  Tensor future = gt(unsqueeze(arange(config.seq_len).to(tokens.device()), 0),
                     unsqueeze(positions, 1));  // [T, seq_len]
  for (std::size_t i = 0; i < model.blocks.size(); ++i) {
    const Block& block = *model.blocks[i];
    Tensor packed = block.attn.qkv(block.ln1(x));
    auto split_heads = [&](std::int64_t part) {  // -> [B, heads, T, head_dim]
      return packed.slice(2, part * d_model, (part + 1) * d_model)
          .reshape({batch, time, heads, head_dim})
          .transpose(1, 2);
    };
    cache.keys[i].index_copy_(2, positions, split_heads(1));
    cache.values[i].index_copy_(2, positions, split_heads(2));
    Tensor scores = matmul(split_heads(0), cache.keys[i].transpose(2, 3)) *
                    (1.0 / std::sqrt(static_cast<double>(head_dim)));
    scores = masked_fill(scores, future, -std::numeric_limits<double>::infinity());
    Tensor mixed = matmul(softmax(scores, -1), cache.values[i]);
    x = x + block.attn.proj(mixed.transpose(1, 2).reshape({batch, time, d_model}));
    x = x + block.mlp(block.ln2(x));
  }
  return model.lm_head(model.final_ln(x));
}

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

}  // namespace kiln::gpt
