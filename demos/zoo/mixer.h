// An MLP-Mixer: patchify, a linear patch embedding, blocks of token mixing (an MLP over the
// tokens, applied to the transposed activations and transposed back) and channel mixing (an MLP
// over the features), each pre-LayerNorm with a residual, then LayerNorm, the mean over tokens
// and a linear classifier. Trained with cross-entropy on zoo::image_batch.
#pragma once

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

struct MixerConfig {
  ImageTask task;
  std::int64_t d_model = 32;
  std::int64_t token_hidden = 16;
  std::int64_t channel_hidden = 64;
  std::int64_t layers = 1;
  std::int64_t tokens() const { return task.classes(); }  // one token per patch
};

class MixerBlock : public nn::Module {
 public:
  MixerBlock(const MixerConfig& c, Generator* gen)
      : norm1(Shape{c.d_model}),
        token_mixing(c.tokens(), c.token_hidden, c.tokens(), gen),
        norm2(Shape{c.d_model}),
        channel_mixing(c.d_model, c.channel_hidden, c.d_model, gen) {
    register_module("norm1", norm1);
    register_module("token_mixing", token_mixing);
    register_module("norm2", norm2);
    register_module("channel_mixing", channel_mixing);
  }
  // x [B, N, D]
  Tensor operator()(const Tensor& x) const {
    Tensor h = x + token_mixing(norm1(x).transpose(1, 2)).transpose(1, 2);  // MLP over N
    return h + channel_mixing(norm2(h));                                    // MLP over D
  }
  nn::LayerNorm norm1;
  GeluMlp token_mixing;
  nn::LayerNorm norm2;
  GeluMlp channel_mixing;
};

class Mixer : public nn::Module {
 public:
  // Initialized on the host from `seed`, in f32 (move or convert it afterwards).
  Mixer(const MixerConfig& c, std::uint64_t seed)
      : config_(c),
        init_(seed),
        stem(c.task.channels * c.task.patch * c.task.patch, c.d_model, true, DType::f32, &init_),
        norm(Shape{c.d_model}),
        head(c.d_model, c.task.classes(), true, DType::f32, &init_) {
    register_module("stem", stem);
    for (std::int64_t i = 0; i < c.layers; ++i) {
      blocks.push_back(std::make_unique<MixerBlock>(c, &init_));
      register_module("blocks." + std::to_string(i), *blocks.back());
    }
    register_module("norm", norm);
    register_module("head", head);
  }

  // images [B, C, H, W] -> logits [B, classes]
  Tensor forward(const Tensor& images) const {
    Tensor x = stem(patchify(images, config_.task.patch));  // [B, N, D]
    for (const auto& block : blocks) x = (*block)(x);
    return head(mean(norm(x), {1}));
  }
  Tensor loss(const Tensor& images, const Tensor& targets) const {
    return cross_entropy(forward(images), targets);
  }
  const MixerConfig& config() const { return config_; }

 private:
  MixerConfig config_;
  Generator init_;  // declared before the layers: their initializers draw from it

 public:
  nn::Linear stem;
  std::vector<std::unique_ptr<MixerBlock>> blocks;
  nn::LayerNorm norm;
  nn::Linear head;
};

}  // namespace kiln::zoo
