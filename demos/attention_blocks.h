// Two self-attention blocks written with primitive ops as users write them, for measuring what
// the attention rewrite does to a compiled step: a Llama-style block (rotary position
// embeddings, grouped-query attention with k and v repeated by expand + reshape, a causal tril
// mask) and a GPT-style one (one fused qkv projection, a triu "future" mask applied with
// masked_fill), each from x [batch, time, d_model] to [batch, time, d_model].
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/ops.h"
#include "runtime/factories.h"
#include "runtime/random.h"

namespace kiln::demos {

struct AttentionBlockConfig {
  std::int64_t batch = 1, time = 16, heads = 4, kv_heads = 2, head_dim = 16;
  std::int64_t d_model() const { return 32; }
};

// The block's weights and fixed buffers, made on `device` from a fixed seed.
struct AttentionBlock {
  AttentionBlockConfig config;
  std::vector<Tensor> weights;  // llama: wq, wk, wv, wo; gpt: wqkv, wo
  Tensor cos, sin;              // rotary tables [time, head_dim] (llama)
  Tensor causal;                // llama: tril (true = attend); gpt: triu(·, 1) (true = drop)
};

inline Tensor block_weight(std::int64_t rows, std::int64_t cols, std::uint64_t seed,
                           Device device) {
  Generator gen(seed);
  return (randn({rows, cols}, DType::f32, &gen) * (1.0 / std::sqrt(static_cast<double>(rows))))
      .to(device);
}

inline AttentionBlock llama_block(const AttentionBlockConfig& c, Device device) {
  AttentionBlock b;
  b.config = c;
  const std::int64_t C = c.d_model(), D = c.head_dim;
  b.weights = {block_weight(C, c.heads * D, 1, device), block_weight(C, c.kv_heads * D, 2, device),
               block_weight(C, c.kv_heads * D, 3, device), block_weight(c.heads * D, C, 4, device)};
  std::vector<double> cos_v, sin_v;
  for (std::int64_t t = 0; t < c.time; ++t)
    for (std::int64_t i = 0; i < D; ++i) {
      double freq = std::pow(10000.0, -2.0 * static_cast<double>(i % (D / 2 > 0 ? D / 2 : 1)) /
                                          static_cast<double>(D));
      cos_v.push_back(std::cos(static_cast<double>(t) * freq));
      sin_v.push_back(std::sin(static_cast<double>(t) * freq));
    }
  b.cos = from_vector(cos_v, {c.time, D}).to(DType::f32).to(device);
  b.sin = from_vector(sin_v, {c.time, D}).to(DType::f32).to(device);
  b.causal = tril(ones({c.time, c.time}, DType::bool_)).to(device);
  return b;
}

inline AttentionBlock gpt_block(const AttentionBlockConfig& c, Device device) {
  AttentionBlock b;
  b.config = c;
  const std::int64_t C = c.heads * c.head_dim;
  b.weights = {block_weight(c.d_model(), 3 * C, 5, device),
               block_weight(C, c.d_model(), 6, device)};
  b.causal = triu(ones({c.time, c.time}, DType::bool_), 1).to(device);
  return b;
}

// The Llama-style block; `w` = wq, wk, wv, wo.
inline Tensor llama_attention(const AttentionBlock& b, const Tensor& x,
                              const std::vector<Tensor>& w) {
  const auto& c = b.config;
  const std::int64_t B = x.shape()[0], T = x.shape()[1], D = c.head_dim, H = c.heads,
                     G = c.heads / c.kv_heads;
  auto split = [&](const Tensor& y, std::int64_t heads) {
    return y.reshape({B, T, heads, D}).transpose(1, 2);  // [B, heads, T, D]
  };
  auto rope = [&](const Tensor& y) {  // rotate-half form
    Tensor lo = y.slice(3, 0, D / 2), hi = y.slice(3, D / 2, D);
    return y * b.cos + cat({neg(hi), lo}, 3) * b.sin;
  };
  auto repeat = [&](const Tensor& y) {
    return y.unsqueeze(2).expand({B, c.kv_heads, G, T, D}).reshape({B, H, T, D});
  };
  Tensor q = rope(split(matmul(x, w[0]), H));
  Tensor k = repeat(rope(split(matmul(x, w[1]), c.kv_heads)));
  Tensor v = repeat(split(matmul(x, w[2]), c.kv_heads));
  Tensor scores = matmul(q, k.transpose(2, 3)) * (1.0 / std::sqrt(static_cast<double>(D)));
  scores = masked_fill(scores, logical_not(b.causal), -std::numeric_limits<double>::infinity());
  Tensor mixed = matmul(softmax(scores, -1), v);
  return matmul(mixed.transpose(1, 2).reshape({B, T, H * D}), w[3]);
}

// The GPT-style block (as demos/gpt_model.h writes its attention); `w` = wqkv, wo.
inline Tensor gpt_attention(const AttentionBlock& b, const Tensor& x,
                            const std::vector<Tensor>& w) {
  const auto& c = b.config;
  const std::int64_t B = x.shape()[0], T = x.shape()[1], D = c.head_dim, H = c.heads, C = H * D;
  Tensor packed = matmul(x, w[0]);
  auto split = [&](std::int64_t part) {
    return packed.slice(2, part * C, (part + 1) * C).reshape({B, T, H, D}).transpose(1, 2);
  };
  Tensor q = split(0), k = split(1), v = split(2);
  Tensor scores = matmul(q, k.transpose(2, 3)) * (1.0 / std::sqrt(static_cast<double>(D)));
  scores = masked_fill(scores, b.causal, -std::numeric_limits<double>::infinity());
  Tensor mixed = matmul(softmax(scores, -1), v);
  return matmul(mixed.transpose(1, 2).reshape({B, T, C}), w[1]);
}

}  // namespace kiln::demos
