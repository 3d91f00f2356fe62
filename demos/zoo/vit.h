// A ViT-style image encoder: patchify by reshape / permute, a linear patch embedding, a class
// token joined by cat, learned position embeddings, pre-LN blocks of bidirectional attention (no
// mask) and a GELU MLP, then the class token or the mean of the tokens into a linear classifier.
// Trained with cross-entropy on zoo::image_batch.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "demos/zoo/gelu_mlp.h"
#include "demos/zoo/patchify.h"
#include "demos/zoo/tasks.h"

namespace kiln::zoo {

struct VitConfig {
  ImageTask task;
  std::int64_t d_model = 32;
  std::int64_t heads = 2;
  std::int64_t layers = 1;
  std::int64_t mlp_hidden = 64;
  bool class_token_pool = true;                               // false: the mean of the patch tokens
  std::int64_t tokens() const { return task.classes() + 1; }  // patches + the class token
};

// Multi-head self-attention over every token: qkv projection, softmax(q k^T * scale) v.
class VitAttention : public nn::Module {
 public:
  VitAttention(const VitConfig& c, Generator* gen)
      : qkv(c.d_model, 3 * c.d_model, true, DType::f32, gen),
        proj(c.d_model, c.d_model, true, DType::f32, gen),
        heads_(c.heads) {
    KILN_CHECK(c.d_model % c.heads == 0, "vit: d_model {} is not a multiple of heads {}", c.d_model,
               c.heads);
    register_module("qkv", qkv);
    register_module("proj", proj);
  }
  Tensor operator()(const Tensor& x) const {
    const std::int64_t b = x.shape()[0], n = x.shape()[1], d = x.shape()[2], hd = d / heads_;
    // [B, N, 3, heads, hd] -> [3, B, heads, N, hd], as timm's Attention
    Tensor packed = qkv(x).reshape({b, n, 3, heads_, hd}).permute({2, 0, 3, 1, 4});
    Tensor q = packed.select(0, 0), k = packed.select(0, 1), v = packed.select(0, 2);
    Tensor scores = matmul(q, k.transpose(2, 3)) * (1.0 / std::sqrt(static_cast<double>(hd)));
    Tensor out = matmul(softmax(scores, -1), v);
    return proj(out.transpose(1, 2).reshape({b, n, d}));
  }
  nn::Linear qkv, proj;

 private:
  std::int64_t heads_;
};

class VitBlock : public nn::Module {
 public:
  VitBlock(const VitConfig& c, Generator* gen)
      : norm1(Shape{c.d_model}),
        attn(c, gen),
        norm2(Shape{c.d_model}),
        mlp(c.d_model, c.mlp_hidden, c.d_model, gen) {
    register_module("norm1", norm1);
    register_module("attn", attn);
    register_module("norm2", norm2);
    register_module("mlp", mlp);
  }
  Tensor operator()(const Tensor& x) const {
    Tensor h = x + attn(norm1(x));
    return h + mlp(norm2(h));
  }
  nn::LayerNorm norm1;
  VitAttention attn;
  nn::LayerNorm norm2;
  GeluMlp mlp;
};

class Vit : public nn::Module {
 public:
  // Initialized on the host from `seed`, in f32 (move or convert it afterwards).
  Vit(const VitConfig& c, std::uint64_t seed)
      : config_(c),
        init_(seed),
        patch_embed(c.task.channels * c.task.patch * c.task.patch, c.d_model, true, DType::f32,
                    &init_),
        cls_token(randn({1, 1, c.d_model}, DType::f32, &init_) * 0.02),
        pos_embed(randn({1, c.tokens(), c.d_model}, DType::f32, &init_)),
        norm(Shape{c.d_model}),
        head(c.d_model, c.task.classes(), true, DType::f32, &init_) {
    register_module("patch_embed", patch_embed);
    register_parameter("cls_token", cls_token);
    register_parameter("pos_embed", pos_embed);
    for (std::int64_t i = 0; i < c.layers; ++i) {
      blocks.push_back(std::make_unique<VitBlock>(c, &init_));
      register_module("blocks." + std::to_string(i), *blocks.back());
    }
    register_module("norm", norm);
    register_module("head", head);
  }

  // images [B, C, H, W] -> logits [B, classes]
  Tensor forward(const Tensor& images) const {
    const std::int64_t b = images.shape()[0];
    Tensor x = patch_embed(patchify(images, config_.task.patch));  // [B, N, D]
    x = cat({cls_token.expand({b, 1, config_.d_model}), x}, 1) + pos_embed;
    for (const auto& block : blocks) x = (*block)(x);
    x = norm(x);
    Tensor pooled =
        config_.class_token_pool ? x.select(1, 0) : mean(x.slice(1, 1, config_.tokens()), {1});
    return head(pooled);
  }
  Tensor loss(const Tensor& images, const Tensor& targets) const {
    return cross_entropy(forward(images), targets);
  }
  const VitConfig& config() const { return config_; }

 private:
  VitConfig config_;
  Generator init_;  // declared before the layers: their initializers draw from it

 public:
  nn::Linear patch_embed;
  Tensor cls_token;  // [1, 1, D]
  // [1, N + 1, D], N(0, 1) as nn::Embedding (timm's 0.02 leaves a model this small and this
  // briefly trained unable to tell the patches apart)
  Tensor pos_embed;
  std::vector<std::unique_ptr<VitBlock>> blocks;
  nn::LayerNorm norm;
  nn::Linear head;
};

}  // namespace kiln::zoo
