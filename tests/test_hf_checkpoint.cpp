// Hugging Face checkpoint names: a file written by the test under GPT-2's and Llama's key names
// (GPT-2's Conv1D weights stored [in, out], as transformers saves them) loads into a model built
// from another seed, which then computes the logits of the model the file was written from; a
// missing, unexpected or untied tensor is an error naming it.
#include <boost/test/unit_test.hpp>

#include <filesystem>

#include "autograd/ops.h"
#include "autograd/safetensors.h"
#include "demos/gpt_model.h"
#include "demos/hf_checkpoint.h"
#include "demos/zoo/llama.h"
#include "support/reference.h"

using namespace kiln;

namespace {

std::string temp_file(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kiln_test_hf_" + name + ".safetensors"))
      .string();
}

// GPT-2's keys for `model`, written out by hand from its layout.
std::vector<std::pair<std::string, Tensor>> gpt2_keys(const gpt::Gpt& model, bool with_head) {
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back("transformer.wte.weight", model.token_embedding.weight);
  out.emplace_back("transformer.wpe.weight", model.position_embedding.weight);
  for (std::size_t i = 0; i < model.blocks.size(); ++i) {
    const gpt::Block& b = *model.blocks[i];
    std::string p = "transformer.h." + std::to_string(i) + ".";
    out.emplace_back(p + "ln_1.weight", b.ln1.weight);
    out.emplace_back(p + "ln_1.bias", b.ln1.bias);
    out.emplace_back(p + "attn.c_attn.weight", b.attn.qkv.weight.transpose(0, 1));
    out.emplace_back(p + "attn.c_attn.bias", b.attn.qkv.bias);
    out.emplace_back(p + "attn.c_proj.weight", b.attn.proj.weight.transpose(0, 1));
    out.emplace_back(p + "attn.c_proj.bias", b.attn.proj.bias);
    out.emplace_back(p + "ln_2.weight", b.ln2.weight);
    out.emplace_back(p + "ln_2.bias", b.ln2.bias);
    out.emplace_back(p + "mlp.c_fc.weight", b.mlp.fc1.weight.transpose(0, 1));
    out.emplace_back(p + "mlp.c_fc.bias", b.mlp.fc1.bias);
    out.emplace_back(p + "mlp.c_proj.weight", b.mlp.fc2.weight.transpose(0, 1));
    out.emplace_back(p + "mlp.c_proj.bias", b.mlp.fc2.bias);
    // transformers' older files keep the causal mask as a buffer
    out.emplace_back(p + "attn.bias", ones({1, 1, 8, 8}));
  }
  out.emplace_back("transformer.ln_f.weight", model.final_ln.weight);
  out.emplace_back("transformer.ln_f.bias", model.final_ln.bias);
  if (with_head) out.emplace_back("lm_head.weight", model.lm_head.weight);
  return out;
}

std::vector<std::pair<std::string, Tensor>> llama_keys(const zoo::Llama& model) {
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back("model.embed_tokens.weight", model.tok_embeddings.weight);
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    const zoo::LlamaBlock& l = *model.layers[i];
    std::string p = "model.layers." + std::to_string(i) + ".";
    out.emplace_back(p + "input_layernorm.weight", l.attention_norm.weight);
    out.emplace_back(p + "self_attn.q_proj.weight", l.attention.wq.weight);
    out.emplace_back(p + "self_attn.k_proj.weight", l.attention.wk.weight);
    out.emplace_back(p + "self_attn.v_proj.weight", l.attention.wv.weight);
    out.emplace_back(p + "self_attn.o_proj.weight", l.attention.wo.weight);
    out.emplace_back(p + "post_attention_layernorm.weight", l.ffn_norm.weight);
    out.emplace_back(p + "mlp.gate_proj.weight", l.feed_forward.w1.weight);
    out.emplace_back(p + "mlp.up_proj.weight", l.feed_forward.w3.weight);
    out.emplace_back(p + "mlp.down_proj.weight", l.feed_forward.w2.weight);
  }
  out.emplace_back("model.norm.weight", model.norm.weight);
  out.emplace_back("lm_head.weight", model.tok_embeddings.weight);  // tie_word_embeddings
  return out;
}

Tensor tokens() {
  return from_vector<std::int64_t>({1, 5, 3, 0, 7, 2, 9, 4}, {2, 4});
}

}  // namespace

BOOST_AUTO_TEST_SUITE(hf_checkpoint)

BOOST_AUTO_TEST_CASE(a_gpt2_file_loads_into_a_model_of_another_seed) {
  gpt::GptConfig config;
  for (bool with_head : {true, false}) {
    gpt::Gpt source(config, 1, Device::cpu()), target(config, 2, Device::cpu());
    // GPT-2 ties its head: the source's is made the embedding so that both files mean one model.
    NoGradGuard no_grad;
    source.lm_head.weight.copy_(source.token_embedding.weight);
    std::string path = temp_file("gpt2");
    save_safetensors(path, gpt2_keys(source, with_head));
    Tensor want = source.forward(tokens());
    BOOST_TEST(!allclose(target.forward(tokens()), want));
    hf::load_hf_gpt2(target, path);
    BOOST_TEST(allclose(target.forward(tokens()), want, 0, 0), "with lm_head: " << with_head);
    std::filesystem::remove(path);
  }
}

BOOST_AUTO_TEST_CASE(a_llama_file_loads_into_a_model_of_another_seed) {
  zoo::LlamaConfig config;
  config.layers = 2;
  zoo::Llama source(config, 1), target(config, 2);
  std::string path = temp_file("llama");
  save_safetensors(path, llama_keys(source));
  NoGradGuard no_grad;
  Tensor want = source.forward(tokens());
  BOOST_TEST(!allclose(target.forward(tokens()), want));
  hf::load_hf_llama(target, path);
  BOOST_TEST(allclose(target.forward(tokens()), want, 0, 0));
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_CASE(missing_unexpected_and_untied_tensors_are_errors_naming_them) {
  gpt::GptConfig config;
  gpt::Gpt model(config, 1, Device::cpu());
  std::string path = temp_file("bad");
  auto keys = gpt2_keys(model, false);
  keys.erase(keys.begin() + 3);  // transformer.h.0.ln_1.bias
  save_safetensors(path, keys);
  KILN_CHECK_THROWS(hf::load_hf_gpt2(model, path), Error,
                    "has no tensor 'transformer.h.0.ln_1.bias'");
  keys = gpt2_keys(model, false);
  keys.emplace_back("transformer.h.7.attn.c_attn.weight", zeros({2, 2}));
  save_safetensors(path, keys);
  KILN_CHECK_THROWS(hf::load_hf_gpt2(model, path), Error,
                    "has tensors the model has no place for: transformer.h.7.attn.c_attn.weight");
  zoo::LlamaConfig llama_config;
  zoo::Llama llama(llama_config, 1);
  auto llama_file = llama_keys(llama);
  llama_file.back().second = zeros(llama.tok_embeddings.weight.shape());
  save_safetensors(path, llama_file);
  KILN_CHECK_THROWS(hf::load_hf_llama(llama, path), Error, "lm_head.weight", "the model ties them");
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_SUITE_END()
