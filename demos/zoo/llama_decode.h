// Decoding the zoo's Llama-style model (llama.h) from a static KV cache, as demos/gpt_decode.h
// does for the GPT: module buffers [B, kv_heads, seq_len, head_dim] per layer (grouped-query
// attention caches the key / value heads only), written in place with index_copy_ at the
// cache rows, a device tensor; the rotary tables are read at each token's position, and
// cached_attention reads the grouped key / value heads without repeating them.
#pragma once

#include <string>
#include <vector>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "demos/decode_loop.h"
#include "demos/zoo/llama.h"

namespace kiln::zoo {

// Keys and values of every layer's key / value heads, in the model's dtype.
class LlamaKvCache : public nn::Module {
 public:
  LlamaKvCache(const LlamaConfig& config, std::int64_t batch, Device device,
               DType dtype = DType::f32) {
    keys.reserve(config.layers);  // the registered slots must not move
    values.reserve(config.layers);
    const Shape shape{batch, config.kv_heads, config.seq_len, config.head_dim};
    for (std::int64_t i = 0; i < config.layers; ++i) {
      keys.push_back(zeros(shape, dtype, device));
      values.push_back(zeros(shape, dtype, device));
      register_buffer("keys." + std::to_string(i), keys.back());
      register_buffer("values." + std::to_string(i), values.back());
    }
  }
  std::vector<Tensor> keys, values;
};

// Logits [B, T, vocab] of `tokens` [B, T] written at cache `rows` (i64 [T]) of sequences whose
// live rows begin at `starts` (i64 [B]), on the model's device; their keys and values go into
// `cache` first. The LM head is the token embedding (tied) unless `head` is given: a Linear
// holding it apart, as quantizing the head to int8 (nn::quantize_int8) wants.
inline Tensor forward_cached(const Llama& model, const LlamaKvCache& cache, const Tensor& tokens,
                             const Tensor& rows, const Tensor& starts,
                             const nn::Linear* head = nullptr) {
  const LlamaConfig& c = model.config();
  const std::int64_t b = tokens.shape()[0], t = tokens.shape()[1], hd = c.head_dim;
  demos::StepPositions at = demos::step_positions(rows, starts);
  auto rotary = [&](const Tensor& table) {  // -> [B, 1, T, head_dim], at each token's position
    return index_select(table, 0, at.positions.reshape({b * t})).reshape({b, 1, t, hd});
  };
  Tensor cos = rotary(model.rope_cos), sin = rotary(model.rope_sin);
  auto heads_of = [&](const Tensor& y, std::int64_t n) {  // -> [B, n, T, head_dim]
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
    cache.keys[i].index_copy_(2, rows, k);
    cache.values[i].index_copy_(2, rows, heads_of(attn.wv(x), c.kv_heads));
    // Grouped-query: each key / value head serves heads / kv_heads query heads, read in place.
    Tensor out = cached_attention(q, cache.keys[i], cache.values[i], at.lengths, starts);
    h = h + attn.wo(out.transpose(1, 2).reshape({b, t, c.heads * hd}));
    h = h + layer.feed_forward(layer.ffn_norm(h));
  }
  if (head) return (*head)(model.norm(h));
  return linear(model.norm(h), model.tok_embeddings.weight);  // the tied LM head
}

}  // namespace kiln::zoo
