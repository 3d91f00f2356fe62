// A Llama-style decoder written the way such models usually are: RMSNorm, rotary position
// embeddings (rotate_half by slice + neg + cat, precomputed cos / sin buffers), grouped-query
// attention whose key / value heads are repeated by unsqueeze + expand + reshape (repeat_kv),
// attention as matmul * scale + an additive causal mask (0 / -inf) -> softmax -> matmul, a SwiGLU
// MLP, no biases, and an LM head tied to the token embedding. Trained on zoo::language_batch.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "runtime/factories.h"

namespace kiln::zoo {

struct LlamaConfig {
  std::int64_t vocab = 16;
  std::int64_t seq_len = 8;
  std::int64_t head_dim = 8;
  std::int64_t heads = 4;
  std::int64_t kv_heads = 2;  // each serves heads / kv_heads query heads
  std::int64_t layers = 1;
  std::int64_t mlp_hidden = 64;
  double rope_base = 10000.0;
  double norm_eps = 1e-5;
  std::int64_t d_model() const { return heads * head_dim; }
};

// x * rsqrt(mean(x^2) + eps) * weight over the last dim.
class RmsNorm : public nn::Module {
 public:
  RmsNorm(std::int64_t dim, double eps) : weight(ones({dim})), eps_(eps) {
    register_parameter("weight", weight);
  }
  Tensor operator()(const Tensor& x) const {
    return x * rsqrt(mean(x * x, {-1}, true) + eps_) * weight;
  }
  Tensor weight;

 private:
  double eps_;
};

// The halves of the last dim swapped, the second negated: [-x2, x1].
inline Tensor rotate_half(const Tensor& x) {
  const std::int64_t half = x.shape().back() / 2;
  return cat({neg(x.slice(-1, half, x.shape().back())), x.slice(-1, 0, half)}, -1);
}

class LlamaAttention : public nn::Module {
 public:
  LlamaAttention(const LlamaConfig& c, Generator* gen)
      : wq(c.d_model(), c.heads * c.head_dim, false, DType::f32, gen),
        wk(c.d_model(), c.kv_heads * c.head_dim, false, DType::f32, gen),
        wv(c.d_model(), c.kv_heads * c.head_dim, false, DType::f32, gen),
        wo(c.heads * c.head_dim, c.d_model(), false, DType::f32, gen),
        config_(c) {
    register_module("wq", wq);
    register_module("wk", wk);
    register_module("wv", wv);
    register_module("wo", wo);
  }

  // x [B, T, d_model]; cos, sin [T, head_dim]; mask [T, T] (0 / -inf) -> [B, T, d_model]
  Tensor operator()(const Tensor& x, const Tensor& cos, const Tensor& sin,
                    const Tensor& mask) const {
    const std::int64_t b = x.shape()[0], t = x.shape()[1], hd = config_.head_dim;
    auto heads_of = [&](const Tensor& y, std::int64_t n) {  // -> [B, n, T, head_dim]
      return y.reshape({b, t, n, hd}).transpose(1, 2);
    };
    Tensor q = heads_of(wq(x), config_.heads);
    Tensor k = heads_of(wk(x), config_.kv_heads);
    Tensor v = heads_of(wv(x), config_.kv_heads);
    q = q * cos + rotate_half(q) * sin;
    k = k * cos + rotate_half(k) * sin;
    k = repeat_kv(k), v = repeat_kv(v);
    Tensor scores = matmul(q, k.transpose(2, 3)) * (1.0 / std::sqrt(static_cast<double>(hd)));
    Tensor out = matmul(softmax(scores + mask, -1), v);  // [B, heads, T, head_dim]
    return wo(out.transpose(1, 2).reshape({b, t, config_.heads * hd}));
  }

  nn::Linear wq, wk, wv, wo;

  // [B, kv_heads, T, hd] -> [B, heads, T, hd], each key / value head serving heads / kv_heads
  // consecutive query heads (also the decode step's, over the whole cache: llama_decode.h).
  Tensor repeat_kv(const Tensor& x) const {
    const std::int64_t rep = config_.heads / config_.kv_heads;
    if (rep == 1) return x;
    const std::int64_t b = x.shape()[0], t = x.shape()[2];
    return x.unsqueeze(2)
        .expand({b, config_.kv_heads, rep, t, config_.head_dim})
        .reshape({b, config_.heads, t, config_.head_dim});
  }

 private:
  LlamaConfig config_;
};

// (silu(x W1) * (x W3)) W2
class SwiGlu : public nn::Module {
 public:
  SwiGlu(std::int64_t dim, std::int64_t hidden, Generator* gen)
      : w1(dim, hidden, false, DType::f32, gen),
        w3(dim, hidden, false, DType::f32, gen),
        w2(hidden, dim, false, DType::f32, gen) {
    register_module("w1", w1);
    register_module("w3", w3);
    register_module("w2", w2);
  }
  Tensor operator()(const Tensor& x) const { return w2(silu(w1(x)) * w3(x)); }
  nn::Linear w1, w3, w2;
};

class LlamaBlock : public nn::Module {
 public:
  LlamaBlock(const LlamaConfig& c, Generator* gen)
      : attention_norm(c.d_model(), c.norm_eps),
        attention(c, gen),
        ffn_norm(c.d_model(), c.norm_eps),
        feed_forward(c.d_model(), c.mlp_hidden, gen) {
    register_module("attention_norm", attention_norm);
    register_module("attention", attention);
    register_module("ffn_norm", ffn_norm);
    register_module("feed_forward", feed_forward);
  }
  Tensor operator()(const Tensor& x, const Tensor& cos, const Tensor& sin,
                    const Tensor& mask) const {
    Tensor h = x + attention(attention_norm(x), cos, sin, mask);
    return h + feed_forward(ffn_norm(h));
  }
  RmsNorm attention_norm;
  LlamaAttention attention;
  RmsNorm ffn_norm;
  SwiGlu feed_forward;
};

class Llama : public nn::Module {
 public:
  // Initialized on the host from `seed`, in f32 (move or convert it afterwards).
  Llama(const LlamaConfig& c, std::uint64_t seed)
      : config_(c),
        init_(seed),
        tok_embeddings(c.vocab, c.d_model(), DType::f32, &init_),
        norm(c.d_model(), c.norm_eps) {
    KILN_CHECK(c.heads > 0 && c.kv_heads > 0 && c.heads % c.kv_heads == 0,
               "llama: heads {} is not a multiple of kv_heads {}", c.heads, c.kv_heads);
    KILN_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0,
               "llama: rotary embeddings need an even head_dim, not {}", c.head_dim);
    register_module("tok_embeddings", tok_embeddings);
    for (std::int64_t i = 0; i < c.layers; ++i) {
      layers.push_back(std::make_unique<LlamaBlock>(c, &init_));
      register_module("layers." + std::to_string(i), *layers.back());
    }
    register_module("norm", norm);
    make_buffers();
    register_buffer("rope_cos", rope_cos);
    register_buffer("rope_sin", rope_sin);
    register_buffer("causal_mask", causal_mask);
  }

  // tokens i64 [B, T] -> logits [B, T, vocab]
  Tensor forward(const Tensor& tokens) const {
    const std::int64_t t = tokens.shape()[1];
    KILN_CHECK(t <= config_.seq_len, "llama: a sequence of {} tokens, longer than seq_len {}", t,
               config_.seq_len);
    Tensor cos = rope_cos.slice(0, 0, t), sin = rope_sin.slice(0, 0, t);
    Tensor mask = causal_mask.slice(0, 0, t).slice(1, 0, t);
    Tensor h = tok_embeddings(tokens);
    for (const auto& layer : layers) h = (*layer)(h, cos, sin, mask);
    return linear(norm(h), tok_embeddings.weight);  // the LM head is the embedding, tied
  }
  Tensor loss(const Tensor& tokens, const Tensor& targets) const {
    return cross_entropy(forward(tokens).reshape({-1, config_.vocab}), targets.reshape({-1}));
  }
  const LlamaConfig& config() const { return config_; }

 private:
  // cos / sin of position * base^(-2i / head_dim), each frequency twice (for both halves), and
  // the additive mask: 0 where position j <= i may be attended, -inf above the diagonal.
  void make_buffers() {
    const std::int64_t t = config_.seq_len, d = config_.head_dim;
    std::vector<double> cos_values(t * d), sin_values(t * d), mask_values(t * t);
    for (std::int64_t p = 0; p < t; ++p) {
      for (std::int64_t i = 0; i < d; ++i) {
        const double inv_freq = std::pow(config_.rope_base, -2.0 * (i % (d / 2)) / d);
        cos_values[p * d + i] = std::cos(p * inv_freq);
        sin_values[p * d + i] = std::sin(p * inv_freq);
      }
      for (std::int64_t j = 0; j < t; ++j)
        mask_values[p * t + j] = j <= p ? 0.0 : -std::numeric_limits<double>::infinity();
    }
    rope_cos = from_vector(cos_values, {t, d}, DType::f32);
    rope_sin = from_vector(sin_values, {t, d}, DType::f32);
    causal_mask = from_vector(mask_values, {t, t}, DType::f32);
  }

  LlamaConfig config_;
  Generator init_;  // declared before the layers: their initializers draw from it

 public:
  nn::Embedding tok_embeddings;
  std::vector<std::unique_ptr<LlamaBlock>> layers;
  RmsNorm norm;
  Tensor rope_cos, rope_sin;  // f32 [seq_len, head_dim]
  Tensor causal_mask;         // f32 [seq_len, seq_len]
};

}  // namespace kiln::zoo
