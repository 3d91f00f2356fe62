// Decoding the demo GPT and the zoo's Llama-style model from static KV caches
// (demos/gpt_decode.h, demos/zoo/llama_decode.h): greedy tokens equal the argmax of the model's
// uncached forward over the whole sequence at every step, compiled steps equal eager ones token
// for token on both devices with at most two traces (the prompt's length and one token), a seed
// reproduces a sampled run, and under CUDA graphs a warm step is one graph launch.
#include <boost/test/unit_test.hpp>

#include "autograd/ops.h"
#include "demos/decode_loop.h"
#include "demos/gpt_decode.h"
#include "demos/zoo/llama_decode.h"
#include "jit/codegen/launch_stats.h"
#include "jit/compile.h"

using namespace kiln;

namespace {

gpt::GptConfig gpt_config() {
  gpt::GptConfig config;  // vocab 16, d_model 32, 2 heads
  config.seq_len = 12;
  config.layers = 2;
  return config;
}

zoo::LlamaConfig llama_config() {
  zoo::LlamaConfig config;  // vocab 16, 4 query heads over 2 key / value heads of 8
  config.seq_len = 12;
  config.layers = 2;
  return config;
}

std::vector<std::int64_t> longs(const Tensor& t) {
  return t.to(Device::cpu()).to_vector<std::int64_t>();
}

Tensor prompt_tokens() {
  return from_vector<std::int64_t>({3, 9, 1, 14, 0, 7}, {2, 3});
}

// The reference: the prompt and `steps` greedy tokens, each the argmax of the uncached forward
// over the whole sequence so far.
template <typename Model>
Tensor greedy_by_full_forwards(const Model& model, int steps) {
  NoGradGuard no_grad;
  Tensor sequence = prompt_tokens();
  for (int n = 0; n < steps; ++n) {
    Tensor logits = model.forward(sequence);
    Tensor next = argmax(select(logits, 1, logits.shape()[1] - 1), -1);
    sequence = cat({sequence, unsqueeze(next, 1)}, 1);
  }
  return sequence;
}

// Greedy decoding on CUDA with a compiled step under CUDA graphs equals eager decoding, with
// at most two traces and the warm steps replayed (8 calls: the prompt's and the first token's
// record their graphs, the other 6 replay); a sampled run from one seed equals eager too.
template <typename Cache, typename Model, typename Config>
void check_graphed_decoding(const Model& model, const Config& config) {
  Cache eager_cache(config, 2, Device::cuda()), graphed_cache(config, 2, Device::cuda());
  auto eager = [&](const Tensor& t, const Tensor& p) {
    return forward_cached(model, eager_cache, t, p);  // gpt:: or zoo::, by argument type
  };
  jit::CompileOptions options;
  options.cuda_graphs = true;
  auto f = jit::compile(
      [&](const Tensor& t, const Tensor& p) { return forward_cached(model, graphed_cache, t, p); },
      options);
  auto graphed = [&f](const Tensor& t, const Tensor& p) { return f(t, p); };
  Tensor prompt = prompt_tokens().to(Device::cuda());
  Tensor want = demos::generate(eager, prompt, 8, {.temperature = 0});
  auto& stats = jit::codegen::launch_stats();
  std::int64_t graphs_before = stats.graph_launches;
  Tensor got = demos::generate(graphed, prompt, 8, {.temperature = 0});
  BOOST_TEST(longs(got) == longs(want), boost::test_tools::per_element());
  BOOST_TEST(f.core().stats().compiles <= 2);
  BOOST_TEST(stats.graph_launches - graphs_before >= 6);
  Generator a(5), b(5);
  SamplingOptions sampled{.temperature = 1.2, .top_k = 6};
  BOOST_TEST(longs(demos::generate(graphed, prompt, 6, sampled, &a)) ==
                 longs(demos::generate(eager, prompt, 6, sampled, &b)),
             boost::test_tools::per_element());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(decode)

BOOST_AUTO_TEST_CASE(greedy_cached_decoding_equals_the_argmax_of_full_forwards) {
  gpt::GptConfig config = gpt_config();
  gpt::Gpt model(config, 5, Device::cpu());
  model.eval();
  gpt::KvCache cache(config, 2, Device::cpu());
  Tensor got = demos::generate(
      [&](const Tensor& t, const Tensor& p) { return gpt::forward_cached(model, cache, t, p); },
      prompt_tokens(), 8, {.temperature = 0});
  BOOST_TEST(got.shape() == (Shape{2, 11}));
  BOOST_TEST(longs(got) == longs(greedy_by_full_forwards(model, 8)),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(compiled_decoding_equals_eager_token_for_token_without_a_trace_per_token) {
  gpt::GptConfig config = gpt_config();
  for (Device device : {Device::cpu(), Device::cuda()}) {
    BOOST_TEST_CONTEXT(device.str()) {
      gpt::Gpt model(config, 5, device);
      model.eval();
      gpt::KvCache eager_cache(config, 2, device), compiled_cache(config, 2, device);
      auto eager = [&](const Tensor& t, const Tensor& p) {
        return gpt::forward_cached(model, eager_cache, t, p);
      };
      auto f = jit::compile([&](const Tensor& t, const Tensor& p) {
        return gpt::forward_cached(model, compiled_cache, t, p);
      });
      auto compiled = [&f](const Tensor& t, const Tensor& p) { return f(t, p); };
      Tensor prompt = prompt_tokens().to(device);
      Tensor want = demos::generate(eager, prompt, 8, {.temperature = 0});
      Tensor got = demos::generate(compiled, prompt, 8, {.temperature = 0});
      BOOST_TEST(longs(got) == longs(want), boost::test_tools::per_element());
      // Traced for the prompt's length and for one token (or once, with T dynamic), never per
      // position.
      BOOST_TEST(f.core().stats().compiles <= 2);
      BOOST_TEST(f.core().stats().calls == 8);
      BOOST_TEST_MESSAGE(device.str() << ": " << f.core().stats().compiles << " traces for "
                                      << f.core().stats().calls << " calls");
      // The compiled step wrote its cache in place, as the eager one did.
      BOOST_TEST(allclose(compiled_cache.keys[1].to(Device::cpu()),
                          eager_cache.keys[1].to(Device::cpu()), 1e-5, 1e-6));
      // Sampled: the same seed draws the same tokens.
      Generator a(31), b(31);
      SamplingOptions sampled{.temperature = 0.9, .top_k = 8, .top_p = 0.95};
      BOOST_TEST(longs(demos::generate(compiled, prompt, 6, sampled, &a)) ==
                     longs(demos::generate(eager, prompt, 6, sampled, &b)),
                 boost::test_tools::per_element());
    }
  }
}

// Under CUDA graphs a warm decode step is one graph launch; the tokens equal eager decoding's.
BOOST_AUTO_TEST_CASE(a_warm_decode_step_replays_one_cuda_graph) {
  gpt::GptConfig config = gpt_config();
  gpt::Gpt model(config, 5, Device::cuda());
  model.eval();
  check_graphed_decoding<gpt::KvCache>(model, config);
}

BOOST_AUTO_TEST_CASE(llama_greedy_cached_decoding_equals_the_argmax_of_full_forwards) {
  zoo::LlamaConfig config = llama_config();
  zoo::Llama model(config, 3);
  zoo::LlamaKvCache cache(config, 2, Device::cpu());
  Tensor got = demos::generate(
      [&](const Tensor& t, const Tensor& p) { return zoo::forward_cached(model, cache, t, p); },
      prompt_tokens(), 9, {.temperature = 0});
  BOOST_TEST(longs(got) == longs(greedy_by_full_forwards(model, 9)),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(llama_compiled_and_graphed_decoding_equal_eager_token_for_token) {
  zoo::LlamaConfig config = llama_config();
  zoo::Llama model(config, 3);
  model.to(Device::cuda());
  check_graphed_decoding<zoo::LlamaKvCache>(model, config);
}

BOOST_AUTO_TEST_SUITE_END()
