// A BERT-style encoder: token and position embeddings, a LayerNorm after them, post-LN blocks of
// bidirectional attention under a key-padding mask (x = LN(x + dropout(attn(x))), then
// x = LN(x + dropout(mlp(x))), an exact GELU MLP), a masked-LM head (transform, GELU, LayerNorm,
// a decoder tied to the token table plus a bias) and a pooler (tanh(linear(CLS))) with a
// classifier. Dropout (0.1, as BERT pre-trains) on the embeddings, the attention probabilities
// and each residual branch, in training mode only. Trained on zoo::masked_lm_batch:
// cross-entropy over the masked positions plus the classifier's cross-entropy.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "demos/dropout.h"
#include "demos/zoo/gelu_mlp.h"
#include "demos/zoo/tasks.h"

namespace kiln::zoo {

struct BertConfig {
  MaskedLmTask task;  // vocab, sequence length, the special tokens
  std::int64_t d_model = 32;
  std::int64_t heads = 2;
  std::int64_t layers = 1;
  std::int64_t mlp_hidden = 64;
  // BERT's hidden_dropout_prob (the embeddings, each residual branch) and
  // attention_probs_dropout_prob.
  double dropout = 0.1;
  double attention_dropout = 0.1;
  double ln_eps = 1e-12;  // BERT's
};

// Multi-head self-attention with separate query, key and value projections (as BERT's), padded
// keys masked to -inf before the softmax, and dropout on the probabilities.
class BertAttention : public nn::Module {
 public:
  BertAttention(const BertConfig& c, Generator* gen, Generator* dropout_gen)
      : query(c.d_model, c.d_model, true, DType::f32, gen),
        key(c.d_model, c.d_model, true, DType::f32, gen),
        value(c.d_model, c.d_model, true, DType::f32, gen),
        output(c.d_model, c.d_model, true, DType::f32, gen),
        probs_dropout(c.attention_dropout, dropout_gen),
        heads_(c.heads) {
    KILN_CHECK(c.d_model % c.heads == 0, "bert: d_model {} is not a multiple of heads {}",
               c.d_model, c.heads);
    register_module("query", query);
    register_module("key", key);
    register_module("value", value);
    register_module("output", output);
    register_module("probs_dropout", probs_dropout);
  }
  // x [B, S, D], padded_keys bool [B, 1, 1, S] (true: masked out) -> [B, S, D]
  Tensor operator()(const Tensor& x, const Tensor& padded_keys) const {
    const std::int64_t b = x.shape()[0], s = x.shape()[1], d = x.shape()[2], hd = d / heads_;
    auto heads = [&](const Tensor& t) { return t.reshape({b, s, heads_, hd}).transpose(1, 2); };
    Tensor q = heads(query(x)), k = heads(key(x)), v = heads(value(x));
    Tensor scores = matmul(q, k.transpose(2, 3)) * (1.0 / std::sqrt(static_cast<double>(hd)));
    scores = masked_fill(scores, padded_keys, -std::numeric_limits<double>::infinity());
    // Dropout on the probabilities, written as the attention rewrite matches it.
    Tensor probs = probs_dropout(softmax(scores, -1));
    return output(matmul(probs, v).transpose(1, 2).reshape({b, s, d}));
  }
  nn::Linear query, key, value, output;
  demos::Dropout probs_dropout;

 private:
  std::int64_t heads_;
};

// Post-LN: the residual sum is normalized, not the branch's input.
class BertLayer : public nn::Module {
 public:
  BertLayer(const BertConfig& c, Generator* gen, Generator* dropout_gen)
      : attn(c, gen, dropout_gen),
        attn_norm(Shape{c.d_model}, c.ln_eps),
        mlp(c.d_model, c.mlp_hidden, c.d_model, gen),
        mlp_norm(Shape{c.d_model}, c.ln_eps),
        resid_dropout(c.dropout, dropout_gen) {
    register_module("attn", attn);
    register_module("attn_norm", attn_norm);
    register_module("mlp", mlp);
    register_module("mlp_norm", mlp_norm);
    register_module("resid_dropout", resid_dropout);
  }
  Tensor operator()(const Tensor& x, const Tensor& padded_keys) const {
    Tensor h = attn_norm(x + resid_dropout(attn(x, padded_keys)));
    return mlp_norm(h + resid_dropout(mlp(h)));
  }
  BertAttention attn;
  nn::LayerNorm attn_norm;
  GeluMlp mlp;
  nn::LayerNorm mlp_norm;
  demos::Dropout resid_dropout;  // on each residual branch
};

class Bert : public nn::Module {
 public:
  // Initialized on the host from `seed`, in f32 (move or convert it afterwards). Dropout masks
  // come from a generator of the model's own, seeded from `seed`: two models built alike draw
  // the same masks in the same order, on any device and in any dtype.
  Bert(const BertConfig& c, std::uint64_t seed)
      : config_(c),
        init_(seed),
        dropout_gen_(demos::dropout_seed(seed)),
        embedding_dropout(c.dropout, &dropout_gen_),
        token_embedding(c.task.vocab, c.d_model, DType::f32, &init_),
        position_embedding(c.task.seq_len, c.d_model, DType::f32, &init_),
        embedding_norm(Shape{c.d_model}, c.ln_eps),
        mlm_transform(c.d_model, c.d_model, true, DType::f32, &init_),
        mlm_norm(Shape{c.d_model}, c.ln_eps),
        mlm_bias(zeros({c.task.vocab})),
        pooler(c.d_model, c.d_model, true, DType::f32, &init_),
        classifier(c.d_model, c.task.classes(), true, DType::f32, &init_) {
    {
      // BERT's initializer range: a tied decoder over N(0, 1) rows would start at logits of
      // standard deviation sqrt(d_model).
      NoGradGuard no_grad;
      token_embedding.weight.mul_(0.02);
      position_embedding.weight.mul_(0.02);
    }
    register_module("token_embedding", token_embedding);
    register_module("position_embedding", position_embedding);
    register_module("embedding_norm", embedding_norm);
    register_module("embedding_dropout", embedding_dropout);
    for (std::int64_t i = 0; i < c.layers; ++i) {
      layers.push_back(std::make_unique<BertLayer>(c, &init_, &dropout_gen_));
      register_module("layers." + std::to_string(i), *layers.back());
    }
    register_module("mlm_transform", mlm_transform);
    register_module("mlm_norm", mlm_norm);
    register_parameter("mlm_bias", mlm_bias);
    register_module("pooler", pooler);
    register_module("classifier", classifier);
  }

  // tokens i64 [B, S] -> hidden states [B, S, D]; keys holding the padding token are masked.
  Tensor encode(const Tensor& tokens) const {
    const std::int64_t b = tokens.shape()[0], s = tokens.shape()[1];
    KILN_CHECK(s <= config_.task.seq_len, "bert: a sequence of {} tokens, longer than seq_len {}",
               s, config_.task.seq_len);
    Tensor padded_keys = (tokens == config_.task.pad_token()).reshape({b, 1, 1, s});
    Tensor x = token_embedding(tokens) + position_embedding.weight.slice(0, 0, s);
    x = embedding_dropout(embedding_norm(x));
    for (const auto& layer : layers) x = (*layer)(x, padded_keys);
    return x;
  }
  // hidden [B, S, D] -> masked-LM logits [B, S, vocab] (the decoder is the token table).
  Tensor mlm_logits(const Tensor& hidden) const {
    Tensor h = mlm_norm(gelu(mlm_transform(hidden)));
    return matmul(h, token_embedding.weight.transpose(0, 1)) + mlm_bias;
  }
  // hidden [B, S, D] -> class logits [B, classes], from the CLS position. No dropout on the
  // pooled output, as BERT's pre-training heads (its fine-tuning classifier has one).
  Tensor class_logits(const Tensor& hidden) const {
    return classifier(tanh(pooler(hidden.select(1, 0))));
  }
  // targets i64 [B, 1 + S]: the class, then per position the masked token or kNoTarget.
  Tensor loss(const Tensor& tokens, const Tensor& targets) const {
    const std::int64_t s = tokens.shape()[1];
    Tensor hidden = encode(tokens);
    Tensor mlm = cross_entropy(mlm_logits(hidden).reshape({-1, config_.task.vocab}),
                               targets.slice(1, 1, 1 + s).reshape({-1}));
    return mlm + cross_entropy(class_logits(hidden), targets.select(1, 0));
  }
  const BertConfig& config() const { return config_; }

 private:
  BertConfig config_;
  Generator init_;  // declared before the layers: their initializers draw from it
  // Advanced by every forward in training mode, a const call included (the forward is const).
  mutable Generator dropout_gen_;

 public:
  demos::Dropout embedding_dropout;  // on the embeddings
  nn::Embedding token_embedding;     // also the masked-LM decoder's weight
  nn::Embedding position_embedding;  // [seq_len, D]
  nn::LayerNorm embedding_norm;
  std::vector<std::unique_ptr<BertLayer>> layers;
  nn::Linear mlm_transform;
  nn::LayerNorm mlm_norm;
  Tensor mlm_bias;  // [vocab]
  nn::Linear pooler;
  nn::Linear classifier;
};

}  // namespace kiln::zoo
