// The zoo's models side by side, each at a small size with its synthetic task and training
// options, behind one interface: what tests/test_zoo*.cpp and bench/bench_zoo.cpp iterate over.
// A user copying a model wants its own header (gpt_model.h, llama.h, vit.h, mixer.h, neox.h,
// bert.h) and trainer.h; this file only erases their types.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "demos/gpt_model.h"
#include "demos/zoo/batch.h"
#include "demos/zoo/bert.h"
#include "demos/zoo/llama.h"
#include "demos/zoo/mixer.h"
#include "demos/zoo/neox.h"
#include "demos/zoo/tasks.h"
#include "demos/zoo/trainer.h"
#include "demos/zoo/vit.h"

namespace kiln::zoo {

// A model and its trainer, built and started.
class Run {
 public:
  virtual ~Run() = default;
  virtual double step(const std::vector<Batch>& micro_batches) = 0;
  virtual std::vector<Tensor> forward_backward(const std::vector<Batch>& micro_batches) = 0;
  virtual Tensor forward(const Batch& micro_batch) = 0;
  virtual void optimizer_step() = 0;
  virtual nn::Module& module() = 0;
  // The compiled loss function's core, or null when eager.
  virtual const jit::CompiledFunctionCore* compiled() const = 0;
};

template <typename Model>
class TypedRun : public Run {
 public:
  TypedRun(std::unique_ptr<Model> model, const TrainOptions& options)
      : model_(std::move(model)), trainer_(*model_, options) {}
  double step(const std::vector<Batch>& b) override { return trainer_.step(b); }
  std::vector<Tensor> forward_backward(const std::vector<Batch>& b) override {
    return trainer_.forward_backward(b);
  }
  Tensor forward(const Batch& b) override { return trainer_.forward(b); }
  void optimizer_step() override { trainer_.optimizer_step(); }
  nn::Module& module() override { return *model_; }
  const jit::CompiledFunctionCore* compiled() const override { return trainer_.compiled(); }

 private:
  std::unique_ptr<Model> model_;
  Trainer<Model> trainer_;
};

struct CatalogEntry {
  std::string name;
  std::int64_t micro_batches = 1;
  double lr = 1e-2;  // AdamW's learning rate for this model (TrainOptions::lr is replaced)
  // One micro-batch of the model's task, on the host (f32 images).
  std::function<Batch(Generator&)> make_batch;
  // The model initialized from `seed` with its floating state in `dtype`, on `device`, and its
  // trainer (options.micro_batches is set from the entry).
  std::function<std::unique_ptr<Run>(std::uint64_t seed, DType dtype, Device device,
                                     TrainOptions options)>
      start;

  // One step's micro-batches, drawn in order from `gen`, on `device` with floating inputs as
  // `float_dtype` (targets unchanged).
  std::vector<Batch> step_batches(Generator& gen, Device device,
                                  DType float_dtype = DType::f32) const {
    std::vector<Batch> batches;
    for (std::int64_t i = 0; i < micro_batches; ++i)
      batches.push_back(make_batch(gen).to(device, float_dtype));
    return batches;
  }
};

namespace catalog_detail {

// Builds in f32 on the host (so every dtype and device starts from the same weights), converts,
// moves, then starts the trainer (AdamW holds the moved tensors).
template <typename Model, typename Build>
auto starter(Build build, std::int64_t micro_batches, double lr) {
  return [build, micro_batches, lr](std::uint64_t seed, DType dtype, Device device,
                                    TrainOptions options) -> std::unique_ptr<Run> {
    std::unique_ptr<Model> model = build(seed);
    if (dtype != DType::f32) model->to(dtype);
    model->to(device);
    options.micro_batches = micro_batches;
    options.lr = lr;
    return std::make_unique<TypedRun<Model>>(std::move(model), options);
  };
}

}  // namespace catalog_detail

// Per micro-batch: 8 sequences of 8 tokens (vocab 16), or 8 images 3x8x8 in 4x4 patches.
inline constexpr std::int64_t kMicroBatch = 8;

// The dropout probability of the zoo's models that train with it (GPT-2, BERT), as they train.
inline constexpr double kZooDropout = 0.1;

// Two heads of head_dim (16 by default: d_model 32), GPT-2's dropout: `dropout` on the embeddings
// and residual branches, `attention_dropout` on the attention probabilities.
inline CatalogEntry gpt2_entry(std::int64_t layers = 1, std::int64_t head_dim = 16,
                               double dropout = kZooDropout,
                               double attention_dropout = kZooDropout) {
  gpt::GptConfig config;  // vocab 16, seq 8, d_model 32, 2 heads
  config.layers = layers;
  config.d_model = config.heads * head_dim;
  config.dropout = dropout;
  config.attention_dropout = attention_dropout;
  auto build = [config](std::uint64_t seed) {
    return std::make_unique<gpt::Gpt>(config, seed, Device::cpu());
  };
  return {head_dim == 16 ? std::string("gpt2") : "gpt2-hd" + std::to_string(head_dim), 1, 1e-2,
          [config](Generator& gen) {
            return language_batch(config.vocab, config.seq_len, kMicroBatch, gen);
          },
          catalog_detail::starter<gpt::Gpt>(build, 1, 1e-2)};
}

// head_dim 8: 4 query heads over 2 key / value heads, d_model 32; head_dim 16 and above: 2 over 1,
// d_model 2 * head_dim. Two micro-batches of gradient accumulation.
inline CatalogEntry llama_entry(std::int64_t head_dim, std::int64_t layers = 1) {
  LlamaConfig config;
  config.head_dim = head_dim;
  config.heads = std::max<std::int64_t>(2, 32 / head_dim);
  config.kv_heads = config.heads / 2;
  config.layers = layers;
  auto build = [config](std::uint64_t seed) { return std::make_unique<Llama>(config, seed); };
  return {"llama-hd" + std::to_string(head_dim), 2, 1e-2,
          [config](Generator& gen) {
            return language_batch(config.vocab, config.seq_len, kMicroBatch, gen);
          },
          catalog_detail::starter<Llama>(build, 2, 1e-2)};
}

// Two heads of head_dim (16 by default: d_model 32).
inline CatalogEntry vit_entry(std::int64_t layers = 1, std::int64_t head_dim = 16) {
  VitConfig config;
  config.layers = layers;
  config.d_model = config.heads * head_dim;
  auto build = [config](std::uint64_t seed) { return std::make_unique<Vit>(config, seed); };
  return {head_dim == 16 ? std::string("vit") : "vit-hd" + std::to_string(head_dim), 1, 3e-3,
          [config](Generator& gen) { return image_batch(config.task, kMicroBatch, gen); },
          catalog_detail::starter<Vit>(build, 1, 3e-3)};
}

inline CatalogEntry mixer_entry(std::int64_t layers = 1) {
  MixerConfig config;
  config.layers = layers;
  auto build = [config](std::uint64_t seed) { return std::make_unique<Mixer>(config, seed); };
  return {"mixer", 1, 1e-2,
          [config](Generator& gen) { return image_batch(config.task, kMicroBatch, gen); },
          catalog_detail::starter<Mixer>(build, 1, 1e-2)};
}

// GPT-NeoX: d_model 32 over heads of head_dim (at least 2 heads), rotary on a quarter of each.
inline CatalogEntry neox_entry(std::int64_t head_dim = 8, std::int64_t layers = 1) {
  NeoxConfig config;
  config.head_dim = head_dim;
  config.heads = std::max<std::int64_t>(2, 32 / head_dim);
  config.intermediate = 4 * config.d_model();
  config.layers = layers;
  auto build = [config](std::uint64_t seed) { return std::make_unique<Neox>(config, seed); };
  return {head_dim == 8 ? std::string("neox") : "neox-hd" + std::to_string(head_dim), 1, 1e-2,
          [config](Generator& gen) {
            return language_batch(config.vocab, config.seq_len, kMicroBatch, gen);
          },
          catalog_detail::starter<Neox>(build, 1, 1e-2)};
}

// A post-LN encoder of two heads of head_dim (16 by default: d_model 32) under a key-padding
// mask, masked-LM and pooler heads, BERT's dropout (as gpt2_entry's).
inline CatalogEntry bert_entry(std::int64_t layers = 1, std::int64_t head_dim = 16,
                               double dropout = kZooDropout,
                               double attention_dropout = kZooDropout) {
  BertConfig config;
  config.layers = layers;
  config.d_model = config.heads * head_dim;
  config.mlp_hidden = 2 * config.d_model;
  config.dropout = dropout;
  config.attention_dropout = attention_dropout;
  auto build = [config](std::uint64_t seed) { return std::make_unique<Bert>(config, seed); };
  return {head_dim == 16 ? std::string("bert") : "bert-hd" + std::to_string(head_dim), 1, 1e-2,
          [config](Generator& gen) { return masked_lm_batch(config.task, kMicroBatch, gen); },
          catalog_detail::starter<Bert>(build, 1, 1e-2)};
}

inline std::vector<CatalogEntry> catalog(std::int64_t layers = 1) {
  return {gpt2_entry(layers),  llama_entry(8, layers), llama_entry(16, layers), vit_entry(layers),
          mixer_entry(layers), neox_entry(8, layers),  bert_entry(layers)};
}

// The entry `name` of catalog(layers) with other dropout probabilities, for the models that have
// dropout (gpt2, bert; 0 and 0 turns it off); nullopt for the others.
inline std::optional<CatalogEntry> with_dropout(const std::string& name, std::int64_t layers,
                                                double dropout, double attention_dropout) {
  if (name == "gpt2") return gpt2_entry(layers, 16, dropout, attention_dropout);
  if (name == "bert") return bert_entry(layers, 16, dropout, attention_dropout);
  return std::nullopt;
}

}  // namespace kiln::zoo
