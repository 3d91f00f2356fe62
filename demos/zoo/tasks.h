// The zoo's synthetic tasks, drawn on the host from a Generator so that every device and dtype
// trains on the same data.
//
// Language (GPT-2, Llama): demos/gpt_model.h's task, a fixed permutation of the previous token
// (attention must fetch position t - 1; position 0 has no target). Images (ViT, Mixer): Gaussian
// noise with one patch brightened, the class saying which, so a classifier needs to know where
// each patch sits (position embeddings, or token mixing).
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/ops.h"
#include "demos/gpt_model.h"
#include "demos/zoo/batch.h"
#include "demos/zoo/patchify.h"

namespace kiln::zoo {

inline Batch language_batch(std::int64_t vocab, std::int64_t seq_len, std::int64_t batch,
                            Generator& gen) {
  gpt::GptConfig config;
  config.vocab = vocab;
  config.seq_len = seq_len;
  gpt::TaskBatch b = gpt::make_batch(config, batch, seq_len, gen, Device::cpu());
  return {b.tokens, b.targets};
}

// Added to every pixel of the labelled patch (the noise has unit variance).
inline constexpr float kBrightening = 2.0f;

struct ImageTask {
  std::int64_t channels = 3;
  std::int64_t image_size = 8;  // height = width
  std::int64_t patch = 4;       // classes: one per patch, (image_size / patch)^2
  std::int64_t classes() const { return (image_size / patch) * (image_size / patch); }
};

inline Batch image_batch(const ImageTask& task, std::int64_t batch, Generator& gen) {
  NoGradGuard no_grad;
  const std::int64_t side = task.image_size, per_row = side / task.patch;
  Tensor labels = randint(0, task.classes(), {batch}, DType::i64, &gen);
  std::vector<float> pixels =
      randn({batch, task.channels, side, side}, DType::f32, &gen).to_vector<float>();
  std::vector<std::int64_t> classes = labels.to_vector<std::int64_t>();
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t top = classes[b] / per_row * task.patch,
                       left = classes[b] % per_row * task.patch;
    for (std::int64_t c = 0; c < task.channels; ++c)
      for (std::int64_t y = top; y < top + task.patch; ++y)
        for (std::int64_t x = left; x < left + task.patch; ++x)
          pixels[((b * task.channels + c) * side + y) * side + x] += kBrightening;
  }
  return {from_vector(pixels, {batch, task.channels, side, side}), labels};
}

}  // namespace kiln::zoo
