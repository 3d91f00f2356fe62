// A GPT-NeoX / Pythia-style decoder, written as Hugging Face's modeling_gpt_neox is: one fused
// query_key_value projection viewed as [B, T, heads, 3 * head_dim] and split by slicing, rotary
// position embeddings on the first rotary_pct of each head's dims only (the rest passed through,
// rejoined by cat), attention as matmul * scale, where(causal, scores, lowest) -> softmax ->
// matmul, the parallel residual x + attn(ln1(x)) + mlp(ln2(x)), LayerNorms with bias, an exact
// GELU MLP, no position embeddings and an untied LM head without bias. Trained on
// zoo::language_batch.
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

struct NeoxConfig {
  std::int64_t vocab = 16;
  std::int64_t seq_len = 8;
  std::int64_t head_dim = 8;
  std::int64_t heads = 4;
  std::int64_t layers = 1;
  std::int64_t intermediate = 128;  // Pythia: 4 * d_model
  double rotary_pct = 0.25;         // Pythia's: rotary on a quarter of each head's dims
  double rotary_base = 10000.0;
  double norm_eps = 1e-5;
  std::int64_t d_model() const { return heads * head_dim; }
  std::int64_t rotary_dims() const { return static_cast<std::int64_t>(head_dim * rotary_pct); }
};

// The halves of the last dim swapped, the second negated: [-x2, x1] (HF's rotate_half).
inline Tensor neox_rotate_half(const Tensor& x) {
  const std::int64_t n = x.shape().back(), half = n / 2;
  return cat({-x.slice(-1, half, n), x.slice(-1, 0, half)}, -1);
}

class NeoxAttention : public nn::Module {
 public:
  NeoxAttention(const NeoxConfig& c, Generator* gen)
      : query_key_value(c.d_model(), 3 * c.d_model(), true, DType::f32, gen),
        dense(c.d_model(), c.d_model(), true, DType::f32, gen),
        config_(c) {
    register_module("query_key_value", query_key_value);
    register_module("dense", dense);
  }

  // x [B, T, d_model]; cos, sin [T, rotary_dims]; causal bool [T, T] -> [B, T, d_model]
  Tensor operator()(const Tensor& x, const Tensor& cos, const Tensor& sin,
                    const Tensor& causal) const {
    const std::int64_t b = x.shape()[0], t = x.shape()[1], hd = config_.head_dim;
    const std::int64_t rot = config_.rotary_dims();
    // [B, T, heads, 3 * hd]: each head's query, key and value side by side, as GPT-NeoX lays
    // out its fused projection
    Tensor qkv = query_key_value(x).reshape({b, t, config_.heads, 3 * hd});
    Tensor query = qkv.slice(-1, 0, hd).permute({0, 2, 1, 3});  // [B, heads, T, hd]
    Tensor key = qkv.slice(-1, hd, 2 * hd).permute({0, 2, 1, 3});
    Tensor value = qkv.slice(-1, 2 * hd, 3 * hd).permute({0, 2, 1, 3});

    auto rotary = [&](const Tensor& y) {
      Tensor y_rot = y.slice(-1, 0, rot), y_pass = y.slice(-1, rot, hd);
      return cat({y_rot * cos + neox_rotate_half(y_rot) * sin, y_pass}, -1);
    };
    query = rotary(query);
    key = rotary(key);

    const double norm_factor = 1.0 / std::sqrt(static_cast<double>(hd));
    Tensor scores = matmul(query, key.transpose(-1, -2)) * norm_factor;
    scores = where(causal, scores, std::numeric_limits<float>::lowest());
    Tensor out = matmul(softmax(scores, -1), value);  // [B, heads, T, hd]
    return dense(out.permute({0, 2, 1, 3}).reshape({b, t, config_.d_model()}));
  }

  nn::Linear query_key_value, dense;

 private:
  NeoxConfig config_;
};

// dense_4h_to_h(gelu(dense_h_to_4h(x)))
class NeoxMlp : public nn::Module {
 public:
  NeoxMlp(const NeoxConfig& c, Generator* gen)
      : dense_h_to_4h(c.d_model(), c.intermediate, true, DType::f32, gen),
        dense_4h_to_h(c.intermediate, c.d_model(), true, DType::f32, gen) {
    register_module("dense_h_to_4h", dense_h_to_4h);
    register_module("dense_4h_to_h", dense_4h_to_h);
  }
  Tensor operator()(const Tensor& x) const { return dense_4h_to_h(gelu(dense_h_to_4h(x))); }
  nn::Linear dense_h_to_4h, dense_4h_to_h;
};

class NeoxLayer : public nn::Module {
 public:
  NeoxLayer(const NeoxConfig& c, Generator* gen)
      : input_layernorm(Shape{c.d_model()}, c.norm_eps),
        post_attention_layernorm(Shape{c.d_model()}, c.norm_eps),
        attention(c, gen),
        mlp(c, gen) {
    register_module("input_layernorm", input_layernorm);
    register_module("post_attention_layernorm", post_attention_layernorm);
    register_module("attention", attention);
    register_module("mlp", mlp);
  }
  // The parallel residual: attention and MLP both read x, their outputs are added to it.
  Tensor operator()(const Tensor& x, const Tensor& cos, const Tensor& sin,
                    const Tensor& causal) const {
    Tensor attn_output = attention(input_layernorm(x), cos, sin, causal);
    Tensor mlp_output = mlp(post_attention_layernorm(x));
    return mlp_output + attn_output + x;
  }
  nn::LayerNorm input_layernorm, post_attention_layernorm;
  NeoxAttention attention;
  NeoxMlp mlp;
};

class Neox : public nn::Module {
 public:
  // Initialized on the host from `seed`, in f32 (move or convert it afterwards).
  Neox(const NeoxConfig& c, std::uint64_t seed)
      : config_(c),
        init_(seed),
        embed_in(c.vocab, c.d_model(), DType::f32, &init_),
        final_layer_norm(Shape{c.d_model()}, c.norm_eps),
        embed_out(c.d_model(), c.vocab, false, DType::f32, &init_) {
    KILN_CHECK(c.rotary_dims() > 0 && c.rotary_dims() % 2 == 0 && c.rotary_dims() <= c.head_dim,
               "neox: rotary_pct {} of head_dim {} gives {} rotary dims, not a positive even count",
               c.rotary_pct, c.head_dim, c.rotary_dims());
    register_module("embed_in", embed_in);
    for (std::int64_t i = 0; i < c.layers; ++i) {
      layers.push_back(std::make_unique<NeoxLayer>(c, &init_));
      register_module("layers." + std::to_string(i), *layers.back());
    }
    register_module("final_layer_norm", final_layer_norm);
    register_module("embed_out", embed_out);
    make_buffers();
    register_buffer("cos_cached", cos_cached);
    register_buffer("sin_cached", sin_cached);
    register_buffer("bias", causal);  // HF's name for the causal mask buffer
  }

  // tokens i64 [B, T] -> logits [B, T, vocab]
  Tensor forward(const Tensor& tokens) const {
    const std::int64_t t = tokens.shape()[1];
    KILN_CHECK(t <= config_.seq_len, "neox: a sequence of {} tokens, longer than seq_len {}", t,
               config_.seq_len);
    Tensor cos = cos_cached.slice(0, 0, t), sin = sin_cached.slice(0, 0, t);
    Tensor mask = causal.slice(0, 0, t).slice(1, 0, t);
    Tensor h = embed_in(tokens);
    for (const auto& layer : layers) h = (*layer)(h, cos, sin, mask);
    return embed_out(final_layer_norm(h));
  }
  Tensor loss(const Tensor& tokens, const Tensor& targets) const {
    return cross_entropy(forward(tokens).reshape({-1, config_.vocab}), targets.reshape({-1}));
  }
  const NeoxConfig& config() const { return config_; }

 private:
  // cos / sin of position * base^(-2i / rotary_dims), each frequency twice (cat(freqs, freqs)),
  // and the bool causal mask, tril of ones: true where position j <= i may be attended.
  void make_buffers() {
    const std::int64_t t = config_.seq_len, d = config_.rotary_dims();
    std::vector<double> cos_values(t * d), sin_values(t * d);
    for (std::int64_t p = 0; p < t; ++p) {
      for (std::int64_t i = 0; i < d; ++i) {
        const double inv_freq = std::pow(config_.rotary_base, -2.0 * (i % (d / 2)) / d);
        cos_values[p * d + i] = std::cos(p * inv_freq);
        sin_values[p * d + i] = std::sin(p * inv_freq);
      }
    }
    cos_cached = from_vector(cos_values, {t, d}, DType::f32);
    sin_cached = from_vector(sin_values, {t, d}, DType::f32);
    causal = tril(ones({t, t}, DType::bool_));
  }

  NeoxConfig config_;
  Generator init_;  // declared before the layers: their initializers draw from it

 public:
  nn::Embedding embed_in;
  std::vector<std::unique_ptr<NeoxLayer>> layers;
  nn::LayerNorm final_layer_norm;
  nn::Linear embed_out;
  Tensor cos_cached, sin_cached;  // f32 [seq_len, rotary_dims]
  Tensor causal;                  // bool [seq_len, seq_len]
};

}  // namespace kiln::zoo
