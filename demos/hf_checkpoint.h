// Loading Hugging Face checkpoints into the demos' GPT-2 (demos/gpt_model.h) and Llama-style
// (demos/zoo/llama.h) models: each file's keys renamed to the model's slots, and GPT-2's Conv1D
// weights ([in, out]) transposed to Linear's [out, in]. The zoo's Llama rotates by rotate_half,
// as Hugging Face's does, so its q / k projections load unpermuted.
#pragma once

#include <fmt/format.h>

#include <map>
#include <optional>
#include <string>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "autograd/safetensors.h"

namespace kiln::hf {

namespace detail {

// The file's tensors by name, each taken at most once (what is left over is reported).
class Checkpoint {
 public:
  Checkpoint(const std::string& path, const SafetensorsFile& file) : path_(path) {
    for (const auto& [name, t] : file.tensors) tensors_.emplace(name, t);
  }
  std::optional<Tensor> take(const std::string& name) {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) return std::nullopt;
    Tensor t = it->second;
    tensors_.erase(it);
    return t;
  }
  Tensor require(const std::string& name) {
    auto t = take(name);
    KILN_CHECK(t.has_value(), "load_hf: {} has no tensor '{}'", path_, name);
    return *t;
  }
  // Keys the model has no slot for, past the ones a format is known to carry (GPT-2's causal
  // mask buffers, Llama's rotary frequencies).
  void check_all_taken(std::initializer_list<const char*> ignored_suffixes) const {
    std::vector<std::string> unexpected;
    for (const auto& [name, t] : tensors_) {
      bool ignored = false;
      for (const char* s : ignored_suffixes)
        ignored = ignored || (name.size() >= std::string_view(s).size() &&
                              name.ends_with(std::string_view(s)));
      if (!ignored) unexpected.push_back(name);
    }
    KILN_CHECK(unexpected.empty(), "load_hf: {} has tensors the model has no place for: {}", path_,
               fmt::join(unexpected, ", "));
  }

 private:
  std::string path_;
  std::map<std::string, Tensor> tensors_;
};

}  // namespace detail

// GPT-2 (`transformer.h.0.attn.c_attn.weight`, ...): the demo's head is a Linear of its own,
// loaded from the file's lm_head.weight, or from the token embedding when the file has none
// (GPT-2 ties them, and transformers saves the tied head once). Loads in place
// (Module::load_state_dict).
template <typename GptModel>
void load_hf_gpt2(GptModel& model, const std::string& path) {
  detail::Checkpoint file(path, load_safetensors(path));
  nn::StateDict state;
  auto linear = [&](const std::string& from, const std::string& to) {  // Conv1D [in, out]
    state.emplace_back(to + ".weight", file.require(from + ".weight").transpose(0, 1));
    state.emplace_back(to + ".bias", file.require(from + ".bias"));
  };
  auto norm = [&](const std::string& from, const std::string& to) {
    state.emplace_back(to + ".weight", file.require(from + ".weight"));
    state.emplace_back(to + ".bias", file.require(from + ".bias"));
  };
  Tensor wte = file.require("transformer.wte.weight");
  state.emplace_back("token_embedding.weight", wte);
  state.emplace_back("position_embedding.weight", file.require("transformer.wpe.weight"));
  for (std::size_t i = 0; i < model.blocks.size(); ++i) {
    std::string hf = fmt::format("transformer.h.{}.", i), ours = fmt::format("blocks.{}.", i);
    norm(hf + "ln_1", ours + "ln1");
    linear(hf + "attn.c_attn", ours + "attn.qkv");
    linear(hf + "attn.c_proj", ours + "attn.proj");
    norm(hf + "ln_2", ours + "ln2");
    linear(hf + "mlp.c_fc", ours + "mlp.fc1");
    linear(hf + "mlp.c_proj", ours + "mlp.fc2");
  }
  norm("transformer.ln_f", "final_ln");
  Tensor head = file.take("lm_head.weight").value_or(wte);
  state.emplace_back("lm_head.weight", head);
  file.check_all_taken({".attn.bias", ".attn.masked_bias"});
  model.load_state_dict(state);
}

// Llama (`model.layers.0.self_attn.q_proj.weight`, ...): the zoo's model ties its LM head to the
// embedding, so an lm_head.weight in the file must equal it (tie_word_embeddings).
template <typename LlamaModel>
void load_hf_llama(LlamaModel& model, const std::string& path) {
  detail::Checkpoint file(path, load_safetensors(path));
  nn::StateDict state;
  auto weight = [&](const std::string& from, const std::string& to) {
    state.emplace_back(to + ".weight", file.require(from + ".weight"));
  };
  Tensor embed = file.require("model.embed_tokens.weight");
  state.emplace_back("tok_embeddings.weight", embed);
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    std::string hf = fmt::format("model.layers.{}.", i), ours = fmt::format("layers.{}.", i);
    weight(hf + "input_layernorm", ours + "attention_norm");
    weight(hf + "self_attn.q_proj", ours + "attention.wq");
    weight(hf + "self_attn.k_proj", ours + "attention.wk");
    weight(hf + "self_attn.v_proj", ours + "attention.wv");
    weight(hf + "self_attn.o_proj", ours + "attention.wo");
    weight(hf + "post_attention_layernorm", ours + "ffn_norm");
    weight(hf + "mlp.gate_proj", ours + "feed_forward.w1");
    weight(hf + "mlp.up_proj", ours + "feed_forward.w3");
    weight(hf + "mlp.down_proj", ours + "feed_forward.w2");
  }
  weight("model.norm", "norm");
  if (auto head = file.take("lm_head.weight")) {
    NoGradGuard no_grad;
    KILN_CHECK(head->shape() == embed.shape() && allclose(*head, embed, 0, 0),
               "load_hf: {} has an lm_head.weight of shape {} that is not its embedding (shape "
               "{}); the model ties them",
               path, shape_str(head->shape()), shape_str(embed.shape()));
  }
  file.check_all_taken({".self_attn.rotary_emb.inv_freq"});
  // Not strict: the rotary and mask buffers stay as the model made them; every parameter is
  // named above, which this checks.
  for (const auto& [name, p] : model.named_parameters()) {
    bool named = false;
    for (const auto& entry : state) named = named || entry.first == name;
    KILN_CHECK(named, "load_hf: the model's parameter '{}' has no Llama checkpoint name", name);
  }
  model.load_state_dict(state, /*strict=*/false);
}

}  // namespace kiln::hf
