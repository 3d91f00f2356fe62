// The zoo's synthetic tasks, drawn on the host from a Generator so that every device and dtype
// trains on the same data.
//
// Language (GPT-2, Llama): demos/gpt_model.h's task, a fixed permutation of the previous token
// (attention must fetch position t - 1; position 0 has no target). Images (ViT, Mixer): Gaussian
// noise with one patch brightened, the class saying which, so a classifier needs to know where
// each patch sits (position embeddings, or token mixing). Masked language modelling (BERT):
// padded runs of consecutive tokens with one masked, and a class per sequence (see
// masked_lm_batch).
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

struct MaskedLmTask {
  std::int64_t vocab = 16;   // the last three are CLS, MASK and the padding token
  std::int64_t seq_len = 8;  // CLS included
  std::int64_t min_length = 4;
  std::int64_t masked = 2;  // masked positions per sequence (distinct, at most length - 2)
  std::int64_t content() const { return vocab - 3; }  // tokens [0, content) carry the text
  std::int64_t cls_token() const { return vocab - 3; }
  std::int64_t mask_token() const { return vocab - 2; }
  std::int64_t pad_token() const { return vocab - 1; }
  std::int64_t classes() const { return 2; }
  // Lengths above this are class 1 ("long"), the others class 0.
  std::int64_t long_above() const { return (min_length + seq_len) / 2 - 1; }
};

// Per sequence a length L in [min_length, seq_len]: CLS, then L - 1 consecutive tokens
// (start + t) mod content() from a random start, then padding. `masked` distinct text positions,
// drawn uniformly, are replaced by MASK; each one's token is predictable from any unmasked one
// (and the positions). inputs i64 [batch, seq_len]; targets i64 [batch, 1 + seq_len]: column 0
// the class (whether L is above long_above(), which the encoder must tell through the
// key-padding mask), then per position the masked token, or gpt::kNoTarget where none is.
inline Batch masked_lm_batch(const MaskedLmTask& task, std::int64_t batch, Generator& gen) {
  NoGradGuard no_grad;
  const std::int64_t s = task.seq_len, m = task.masked;
  KILN_CHECK(m >= 1 && task.min_length >= m + 2 && task.min_length <= s && task.vocab > 3,
             "masked_lm_batch: min_length {} must be in [masked {} + 2, seq_len {}], vocab {} > 3",
             task.min_length, m, s, task.vocab);
  std::vector<std::int64_t> lengths =
      randint(task.min_length, s + 1, {batch}, DType::i64, &gen).to_vector<std::int64_t>();
  std::vector<std::int64_t> starts =
      randint(0, task.content(), {batch}, DType::i64, &gen).to_vector<std::int64_t>();
  std::vector<std::int64_t> picks =
      randint(0, 1 << 20, {batch, m}, DType::i64, &gen).to_vector<std::int64_t>();
  std::vector<std::int64_t> tokens(batch * s, task.pad_token());
  std::vector<std::int64_t> targets(batch * (1 + s), gpt::kNoTarget);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t length = lengths[b];
    std::int64_t* row = &tokens[b * s];
    std::int64_t* target = &targets[b * (1 + s)];
    row[0] = task.cls_token();
    for (std::int64_t t = 1; t < length; ++t) row[t] = (starts[b] + t) % task.content();
    target[0] = length > task.long_above() ? 1 : 0;
    for (std::int64_t j = 0; j < m; ++j) {
      // The pick-th text position not yet masked.
      std::int64_t skip = picks[b * m + j] % (length - 1 - j), t = 1;
      for (;; ++t)
        if (row[t] != task.mask_token() && skip-- == 0) break;
      target[1 + t] = row[t];
      row[t] = task.mask_token();
    }
  }
  return {from_vector(tokens, {batch, s}), from_vector(targets, {batch, 1 + s})};
}

}  // namespace kiln::zoo
