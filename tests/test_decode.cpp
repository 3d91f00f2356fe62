// Decoding the demo GPT and the zoo's Llama-style model from static KV caches
// (demos/gpt_decode.h, demos/zoo/llama_decode.h): greedy tokens equal the argmax of the model's
// uncached forward over the whole sequence at every step, compiled steps equal eager ones token
// for token on both devices with at most two traces (the prompt's length and one token), a seed
// reproduces a sampled run, under CUDA graphs a warm step is one graph launch, left-padded
// prompts of different lengths decode in one batch as each would alone, and with int8 weights
// the compiled step's matmuls are skinny GEMMs reading them and decode as eager does.
#include <boost/test/unit_test.hpp>

#include "autograd/ops.h"
#include "demos/decode_loop.h"
#include "demos/gpt_decode.h"
#include "demos/zoo/llama_decode.h"
#include "jit/codegen/launch_stats.h"
#include "jit/compile.h"
#include "jit/kernel_plan.h"
#include "support/plan_steps.h"
#include "support/scoped_env.h"

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
  auto eager = [&](const Tensor& t, const Tensor& r, const Tensor& s) {
    return forward_cached(model, eager_cache, t, r, s);  // gpt:: or zoo::, by argument type
  };
  jit::CompileOptions options;
  options.cuda_graphs = true;
  auto f =
      jit::compile([&](const Tensor& t, const Tensor& r,
                       const Tensor& s) { return forward_cached(model, graphed_cache, t, r, s); },
                   options);
  auto graphed = [&f](const Tensor& t, const Tensor& r, const Tensor& s) { return f(t, r, s); };
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

// Prompts of different lengths, left-padded into one batch, decode as each prompt alone: the
// prefill's last logits of every row equal that prompt's own (batch 1, no padding), and so do the
// greedy tokens, eager on the CPU and compiled under CUDA graphs. With the padding read as tokens
// (starts all 0) some row's logits differ, so the comparison sees the padding.
template <typename Cache, typename Model, typename Config>
void check_left_padded_decoding(const Model& cpu_model, const Model& cuda_model,
                                const Config& config) {
  const std::vector<std::vector<std::int64_t>> prompts{{3, 9, 1, 14}, {0, 7}, {5, 12, 2}};
  const std::int64_t batch = 3, new_tokens = 6;
  auto step_of = [](const Model& model, Cache& cache) {
    return [&model, &cache](const Tensor& t, const Tensor& r, const Tensor& s) {
      return forward_cached(model, cache, t, r, s);  // gpt:: or zoo::, by argument type
    };
  };
  auto last_logits = [](const Tensor& logits, std::int64_t row) {
    return select(select(logits, 0, row), 0, logits.shape()[1] - 1).to(Device::cpu());
  };
  NoGradGuard no_grad;
  demos::Prompts padded = demos::left_padded(prompts, Device::cpu(), /*pad=*/11);
  const std::int64_t padded_len = padded.tokens.shape()[1];
  Cache batch_cache(config, batch, Device::cpu()), unpadded_cache(config, batch, Device::cpu());
  Tensor rows = arange(padded_len);
  Tensor batch_logits = forward_cached(cpu_model, batch_cache, padded.tokens, rows, padded.starts);
  Tensor unpadded =
      forward_cached(cpu_model, unpadded_cache, padded.tokens, rows, zeros({batch}, DType::i64));
  bool padding_matters = false;
  Tensor eager =
      demos::generate(step_of(cpu_model, batch_cache), padded, new_tokens, {.temperature = 0});
  Cache graphed_cache(config, batch, Device::cuda());
  jit::CompileOptions options;
  options.cuda_graphs = true;
  auto f = jit::compile(step_of(cuda_model, graphed_cache), options);
  demos::Prompts on_cuda{padded.tokens.to(Device::cuda()), padded.starts.to(Device::cuda())};
  Tensor graphed = demos::generate(
      [&f](const Tensor& t, const Tensor& r, const Tensor& s) { return f(t, r, s); }, on_cuda,
      new_tokens, {.temperature = 0});
  for (std::int64_t b = 0; b < batch; ++b) {
    BOOST_TEST_CONTEXT("prompt " << b) {
      const auto& p = prompts[static_cast<std::size_t>(b)];
      const auto len = static_cast<std::int64_t>(p.size());
      Tensor alone_prompt = from_vector(p, {1, len});
      Cache alone_cache(config, 1, Device::cpu());
      Tensor alone_logits =
          forward_cached(cpu_model, alone_cache, alone_prompt, arange(len), zeros({1}, DType::i64));
      BOOST_TEST(allclose(last_logits(batch_logits, b), last_logits(alone_logits, 0), 1e-4, 1e-5));
      padding_matters = padding_matters || !allclose(last_logits(unpadded, b),
                                                     last_logits(alone_logits, 0), 1e-4, 1e-5);
      Cache fresh(config, 1, Device::cpu());
      auto alone = longs(
          demos::generate(step_of(cpu_model, fresh), alone_prompt, new_tokens, {.temperature = 0}));
      std::vector<std::int64_t> want(alone.end() - new_tokens, alone.end());
      for (const Tensor& got : {eager, graphed}) {
        auto row = longs(select(got, 0, b));
        BOOST_TEST(std::vector<std::int64_t>(row.end() - new_tokens, row.end()) == want,
                   boost::test_tools::per_element());
      }
    }
  }
  BOOST_TEST(padding_matters);
  BOOST_TEST(f.core().stats().compiles <= 2);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(decode)

BOOST_AUTO_TEST_CASE(greedy_cached_decoding_equals_the_argmax_of_full_forwards) {
  gpt::GptConfig config = gpt_config();
  gpt::Gpt model(config, 5, Device::cpu());
  model.eval();
  gpt::KvCache cache(config, 2, Device::cpu());
  Tensor got =
      demos::generate([&](const Tensor& t, const Tensor& r,
                          const Tensor& s) { return gpt::forward_cached(model, cache, t, r, s); },
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
      auto eager = [&](const Tensor& t, const Tensor& r, const Tensor& s) {
        return gpt::forward_cached(model, eager_cache, t, r, s);
      };
      auto f = jit::compile([&](const Tensor& t, const Tensor& r, const Tensor& s) {
        return gpt::forward_cached(model, compiled_cache, t, r, s);
      });
      auto compiled = [&f](const Tensor& t, const Tensor& r, const Tensor& s) {
        return f(t, r, s);
      };
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
  Tensor got =
      demos::generate([&](const Tensor& t, const Tensor& r,
                          const Tensor& s) { return zoo::forward_cached(model, cache, t, r, s); },
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

BOOST_AUTO_TEST_CASE(left_padded_prompts_decode_as_each_prompt_alone) {
  gpt::GptConfig config = gpt_config();
  gpt::Gpt cpu_model(config, 5, Device::cpu()), cuda_model(config, 5, Device::cuda());
  cpu_model.eval();
  cuda_model.eval();
  check_left_padded_decoding<gpt::KvCache>(cpu_model, cuda_model, config);
}

BOOST_AUTO_TEST_CASE(llama_left_padded_prompts_decode_as_each_prompt_alone) {
  zoo::LlamaConfig config = llama_config();
  zoo::Llama cpu_model(config, 3), cuda_model(config, 3);
  cuda_model.to(Device::cuda());
  check_left_padded_decoding<zoo::LlamaKvCache>(cpu_model, cuda_model, config);
}

// Weight-only int8 (nn::quantize_int8): at two rows, every weight size taken, each of the compiled
// token step's 9 matmuls is a skinny GEMM reading its int8 weight, and graphed decoding equals
// eager decoding (casts and cuBLASLt) token for token, greedy and sampled.
BOOST_AUTO_TEST_CASE(int8_weights_decode_through_skinny_gemms_as_eager) {
  test::ScopedEnv every_size("KILN_SKINNY_GEMM", "1");
  gpt::GptConfig config = gpt_config();
  gpt::Gpt model(config, 5, Device::cpu());
  model.eval();
  nn::quantize_int8(model);
  model.to(Device::cuda());
  check_graphed_decoding<gpt::KvCache>(model, config);

  NoGradGuard no_grad;
  gpt::KvCache cache(config, 2, Device::cuda());
  auto step = jit::compile([&](const Tensor& t, const Tensor& r, const Tensor& s) {
    return gpt::forward_cached(model, cache, t, r, s);
  });
  step(from_vector<std::int64_t>({3, 9}, {2, 1}).to(Device::cuda()),
       zeros({1}, DType::i64, Device::cuda()), zeros({2}, DType::i64, Device::cuda()));
  const jit::KernelPlan* plan = step.core().plan(0);
  BOOST_TEST_REQUIRE(plan != nullptr);
  BOOST_TEST(test::count_steps<jit::SkinnyGemmStep>(*plan) == 9, plan->str());
  BOOST_TEST(plan->str().find("as i8 in registers") != std::string::npos, plan->str());
}

BOOST_AUTO_TEST_SUITE_END()
