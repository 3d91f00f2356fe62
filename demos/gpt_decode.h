// Decoding with the demo GPT (demos/gpt_model.h) from a static KV cache: module buffers
// [B, heads, seq_len, head_dim] per layer, written in place at the new tokens' positions with
// index_copy_, and the positions as a device tensor, so a compiled step is traced once for the
// prompt's length and once for one token, never per position. Attention reads the whole cache
// with the positions after each query masked (the live-length attention kernel is to come).
#pragma once

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "autograd/nn.h"
#include "autograd/ops.h"
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

}  // namespace kiln::gpt
