// Decoding with the demo GPT (demos/gpt_model.h) from a static KV cache: module buffers
// [B, heads, seq_len, head_dim] per layer, written in place at the new tokens' cache rows with
// index_copy_, and the rows as a device tensor, so a compiled step is traced once for the
// prompt's length and once for one token, never per position. Attention is cached_attention: it
// reads each sequence's live rows only (its left padding and the rows not yet written skipped).
#pragma once

#include <string>
#include <vector>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "demos/decode_loop.h"
#include "demos/gpt_model.h"

namespace kiln::gpt {

// Keys and values of every layer for `batch` sequences of up to config.seq_len tokens, in the
// model's dtype.
class KvCache : public nn::Module {
 public:
  KvCache(const GptConfig& config, std::int64_t batch, Device device, DType dtype = DType::f32) {
    const std::int64_t head_dim = config.d_model / config.heads;
    keys.reserve(config.layers);  // the registered slots must not move
    values.reserve(config.layers);
    for (std::int64_t i = 0; i < config.layers; ++i) {
      keys.push_back(zeros({batch, config.heads, config.seq_len, head_dim}, dtype, device));
      values.push_back(zeros({batch, config.heads, config.seq_len, head_dim}, dtype, device));
      register_buffer("keys." + std::to_string(i), keys.back());
      register_buffer("values." + std::to_string(i), values.back());
    }
  }
  std::vector<Tensor> keys, values;
};

// Logits [B, T, vocab] of `tokens` [B, T] written at cache `rows` (i64 [T]) of sequences whose
// live rows begin at `starts` (i64 [B]), on the model's device; their keys and values go into
// `cache` first. In eval mode (no dropout).
inline Tensor forward_cached(const Gpt& model, const KvCache& cache, const Tensor& tokens,
                             const Tensor& rows, const Tensor& starts) {
  KILN_CHECK(!model.is_training(), "gpt: decode in eval mode (model.eval())");
  const GptConfig& config = model.config();
  const std::int64_t batch = tokens.shape()[0], time = tokens.shape()[1];
  const std::int64_t d_model = config.d_model, heads = config.heads, head_dim = d_model / heads;
  demos::StepPositions at = demos::step_positions(rows, starts);
  Tensor x = model.token_embedding(tokens) + model.position_embedding(at.positions);
  for (std::size_t i = 0; i < model.blocks.size(); ++i) {
    const Block& block = *model.blocks[i];
    Tensor packed = block.attn.qkv(block.ln1(x));
    auto split_heads = [&](std::int64_t part) {  // -> [B, heads, T, head_dim]
      return packed.slice(2, part * d_model, (part + 1) * d_model)
          .reshape({batch, time, heads, head_dim})
          .transpose(1, 2);
    };
    cache.keys[i].index_copy_(2, rows, split_heads(1));
    cache.values[i].index_copy_(2, rows, split_heads(2));
    // Each query reads its sequence's rows from its start through its own row.
    Tensor mixed =
        cached_attention(split_heads(0), cache.keys[i], cache.values[i], at.lengths, starts);
    x = x + block.attn.proj(mixed.transpose(1, 2).reshape({batch, time, d_model}));
    x = x + block.mlp(block.ln2(x));
  }
  return model.lm_head(model.final_ln(x));
}

}  // namespace kiln::gpt
