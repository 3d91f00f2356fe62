// Decoding the zoo's Llama-style model (llama.h) from a static KV cache, as demos/gpt_decode.h
// does for the GPT: module buffers [B, kv_heads, seq_len, head_dim] per layer (grouped-query
// attention caches the key / value heads only), written in place with index_copy_ at the
// positions, a device tensor; the rotary tables and the causal mask are read at those positions.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "demos/zoo/llama.h"

namespace kiln::zoo {

class LlamaKvCache : public nn::Module {
 public:
  LlamaKvCache(const LlamaConfig& config, std::int64_t batch, Device device) {
    keys.reserve(config.layers);  // the registered slots must not move
    values.reserve(config.layers);
    const Shape shape{batch, config.kv_heads, config.seq_len, config.head_dim};
    for (std::int64_t i = 0; i < config.layers; ++i) {
      keys.push_back(zeros(shape, DType::f32, device));
      values.push_back(zeros(shape, DType::f32, device));
      register_buffer("keys." + std::to_string(i), keys.back());
      register_buffer("values." + std::to_string(i), values.back());
    }
  }
  std::vector<Tensor> keys, values;
};

// Logits [B, T, vocab] of `tokens` [B, T] at `positions` (i64 [T] on the model's device), their
// keys and values written into `cache` first.
inline Tensor forward_cached(const Llama& model, const LlamaKvCache& cache, const Tensor& tokens,
                             const Tensor& positions) {
  const LlamaConfig& c = model.config();
  const std::int64_t b = tokens.shape()[0], t = tokens.shape()[1], hd = c.head_dim;
  Tensor cos = index_select(model.rope_cos, 0, positions);
  Tensor sin = index_select(model.rope_sin, 0, positions);
  Tensor mask = index_select(model.causal_mask, 0, positions);  // [T, seq_len]: 0 / -inf
  auto heads_of = [&](const Tensor& y, std::int64_t n) {        // -> [B, n, T, head_dim]
    return y.reshape({b, t, n, hd}).transpose(1, 2);
  };
  Tensor h = model.tok_embeddings(tokens);
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    const LlamaBlock& layer = *model.layers[i];
    const LlamaAttention& attn = layer.attention;
    Tensor x = layer.attention_norm(h);
    Tensor q = heads_of(attn.wq(x), c.heads);
    Tensor k = heads_of(attn.wk(x), c.kv_heads);
    q = q * cos + rotate_half(q) * sin;
    k = k * cos + rotate_half(k) * sin;
    cache.keys[i].index_copy_(2, positions, k);
    cache.values[i].index_copy_(2, positions, heads_of(attn.wv(x), c.kv_heads));
    Tensor scores = matmul(q, attn.repeat_kv(cache.keys[i]).transpose(2, 3)) *
                    (1.0 / std::sqrt(static_cast<double>(hd)));
    Tensor out = matmul(softmax(scores + mask, -1), attn.repeat_kv(cache.values[i]));
    h = h + attn.wo(out.transpose(1, 2).reshape({b, t, c.heads * hd}));
    h = h + layer.feed_forward(layer.ffn_norm(h));
  }
  return linear(model.norm(h), model.tok_embeddings.weight);  // the tied LM head
}

}  // namespace kiln::zoo
