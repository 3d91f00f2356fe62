// Generation with the demo GPT and the zoo's Llama-style model: trains each on their synthetic
// task (the output at position t is a fixed permutation of token t - 1, demos/gpt_model.h, so a
// continuation has token t + 1 = perm(token t - 1)), then continues prompts from a static KV
// cache (demos/gpt_decode.h, demos/zoo/llama_decode.h): one compiled call for the prompt, one per
// new token. Greedy decoding runs eager and compiled and must agree token for token; a sampled
// run follows. With --int8 the trained models' Linears are quantized to weight-only int8 first
// (nn::quantize_int8).
//
//   build/generate [--model gpt|llama|all] [--steps N] [--tokens N] [--temperature T]
//                  [--top-k K] [--top-p P] [--seed S] [--device cpu|cuda] [--int8]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "autograd/sampling.h"
#include "demos/decode_loop.h"
#include "demos/gpt_decode.h"
#include "demos/zoo/catalog.h"
#include "demos/zoo/llama_decode.h"
#include "demos/zoo/tasks.h"
#include "jit/codegen/launch_stats.h"

using namespace kiln;

namespace {

struct Options {
  std::int64_t steps = 0, tokens = 12;  // steps 0: each model's own (gpt 40, llama 120)
  SamplingOptions sampling{.temperature = 1.5, .top_k = 4, .top_p = 1.0};
  std::uint64_t seed = 7;
  std::string model = "all";  // gpt, llama or all
  Device device = Device::cuda();
  bool int8 = false;  // decode with weight-only int8 Linears
};

// The flags, by CLI11 (as the kiln tool's); a bad one prints why and exits 2.
Options parse(int argc, char** argv) {
  Options o;
  std::string device = "cuda";
  CLI::App app{"Trains the demo GPT and the zoo's Llama-style model, then generates with them",
               "generate"};
  app.add_option("--model", o.model, "gpt, llama or all")
      ->check(CLI::IsMember({"gpt", "llama", "all"}));
  app.add_option("--steps", o.steps, "training steps (0: each model's own, gpt 40, llama 120)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--tokens", o.tokens, "tokens to generate after each prompt")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--temperature", o.sampling.temperature, "0 is greedy")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--top-k", o.sampling.top_k, "0 keeps every token")->check(CLI::NonNegativeNumber);
  app.add_option("--top-p", o.sampling.top_p, "1 keeps every token")->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", o.seed, "the sampled run's generator seed");
  app.add_flag("--int8", o.int8, "quantize the trained Linears to weight-only int8 first");
  app.add_option("--device", device, "cpu or cuda (the virtual GPU without one)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
  o.device = device == "cpu" ? Device::cpu() : Device::cuda();
  return o;
}

// Each row of `sequences`, the prompt apart (its left padding as dots), and how many generated
// tokens follow the task's rule: the permutation of the token two before (the model's output at t
// is perm(token t - 1)). Every prompt has two tokens or more, so that token is never padding.
std::int64_t print_rows(const char* label, const Tensor& sequences, const Tensor& starts,
                        std::int64_t prompt_len, std::int64_t vocab) {
  auto v = sequences.to(Device::cpu()).to_vector<std::int64_t>();
  auto pads = starts.to(Device::cpu()).to_vector<std::int64_t>();
  const std::int64_t rows = sequences.shape()[0], cols = sequences.shape()[1];
  const std::int64_t a = gpt::permutation_multiplier(vocab);
  std::int64_t follows = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::printf("  %-9s", r == 0 ? label : "");
    for (std::int64_t c = 0; c < cols; ++c) {
      std::int64_t t = v[r * cols + c];
      if (c >= prompt_len) follows += t == (a * v[r * cols + c - 2] + 3) % vocab;
      if (c < pads[r])
        std::printf("  .");
      else
        std::printf(c == prompt_len ? " | %2lld" : " %2lld", static_cast<long long>(t));
    }
    std::printf("\n");
  }
  return follows;
}

// Greedy eager and compiled, then sampled, from `model` (trained) with caches of type Cache.
// Returns whether compiled greedy decoding equals eager.
template <typename Cache, typename Model, typename Config>
bool decode(const char* name, const Model& model, const Config& config, const Options& o) {
  // Prompts of 2 to 4 tokens, left-padded into one batch.
  demos::Prompts prompt = demos::left_padded({{3, 9}, {1, 14, 0}, {7, 5}, {5, 5, 2, 8}}, o.device);
  const std::int64_t prompt_len = prompt.tokens.shape()[1], batch = prompt.tokens.shape()[0];
  Cache eager_cache(config, batch, o.device), compiled_cache(config, batch, o.device);
  // forward_cached is found by argument type: gpt:: or zoo::.
  auto eager = [&](const Tensor& t, const Tensor& r, const Tensor& s) {
    return forward_cached(model, eager_cache, t, r, s);
  };
  jit::CompileOptions compile_options;
  compile_options.name = std::string(name) + "_decode";
  // A warm step replays as one CUDA graph (the tokens, rows and starts copied into its inputs).
  compile_options.cuda_graphs = o.device.is_cuda();
  auto step =
      jit::compile([&](const Tensor& t, const Tensor& r,
                       const Tensor& s) { return forward_cached(model, compiled_cache, t, r, s); },
                   compile_options);
  auto compiled = [&step](const Tensor& t, const Tensor& r, const Tensor& s) {
    return step(t, r, s);
  };

  Tensor want = demos::generate(eager, prompt, o.tokens, {.temperature = 0});
  auto& stats = jit::codegen::launch_stats();
  auto launches_before = stats.launches.load(), graphs_before = stats.graph_launches.load();
  Tensor got = demos::generate(compiled, prompt, o.tokens, {.temperature = 0});
  auto launches = stats.launches.load() - launches_before;
  auto graph_launches = stats.graph_launches.load() - graphs_before;
  std::printf("\n%s, greedy (prompt | generated):\n", name);
  std::int64_t follows = print_rows("compiled", got, prompt.starts, prompt_len, config.vocab);
  bool same = got.to(Device::cpu()).to_vector<std::int64_t>() ==
              want.to(Device::cpu()).to_vector<std::int64_t>();
  std::printf("  %lld of %lld generated tokens follow the task's rule; compiled %s eager\n",
              static_cast<long long>(follows), static_cast<long long>(batch * o.tokens),
              same ? "equals" : "DIFFERS FROM");
  std::printf("  %lld traces for %lld calls: %lld kernel launches, %lld graph launches\n",
              static_cast<long long>(step.core().stats().compiles),
              static_cast<long long>(step.core().stats().calls), static_cast<long long>(launches),
              static_cast<long long>(graph_launches));

  Generator gen(o.seed);
  Tensor sampled = demos::generate(compiled, prompt, o.tokens, o.sampling, &gen);
  std::printf("\n%s, sampled (temperature %g, top-k %lld, top-p %g, seed %llu):\n", name,
              o.sampling.temperature, static_cast<long long>(o.sampling.top_k), o.sampling.top_p,
              static_cast<unsigned long long>(o.seed));
  std::int64_t sampled_follows =
      print_rows("compiled", sampled, prompt.starts, prompt_len, config.vocab);
  std::printf("  %lld of %lld generated tokens follow the task's rule\n",
              static_cast<long long>(sampled_follows), static_cast<long long>(batch * o.tokens));
  return same;
}

void quantize_if_asked(nn::Module& model, const char* name, const Options& o) {
  if (!o.int8) return;
  nn::quantize_int8(model);
  std::printf("%s: Linear weights quantized to int8 (one scale per output channel)\n", name);
}

void print_trained(const char* name, std::int64_t steps, Device device, double loss) {
  std::printf("%s: trained %lld steps on %s, loss %.4f (ln 16 = 2.77 knows nothing)\n", name,
              static_cast<long long>(steps), device.str().c_str(), loss);
}

bool run_gpt(const Options& o) {
  gpt::GptConfig config;  // vocab 16, d_model 32, 2 heads, 2 layers
  config.seq_len = 4 + o.tokens;
  gpt::TrainConfig train;
  train.steps = o.steps > 0 ? o.steps : 40;
  gpt::Trainer trainer(config, train, o.device, /*compiled=*/true);
  double loss = 0;
  for (std::int64_t s = 0; s < train.steps; ++s) loss = trainer.step();
  print_trained("gpt", train.steps, o.device, loss);
  trainer.model().eval();
  quantize_if_asked(trainer.model(), "gpt", o);
  return decode<gpt::KvCache>("gpt", trainer.model(), config, o);
}

// The zoo's Llama-style model, trained as zoo_train does (AdamW, two micro-batches a step).
bool run_llama(const Options& o) {
  zoo::LlamaConfig config;  // vocab 16, 4 query heads over 2 key / value heads of 8
  config.seq_len = 4 + o.tokens;
  config.layers = 2;
  auto build = [config](std::uint64_t seed) { return std::make_unique<zoo::Llama>(config, seed); };
  zoo::TrainOptions train;
  train.compiled = true;
  train.name = "llama_loss";
  auto run =
      zoo::catalog_detail::starter<zoo::Llama>(build, 2, 1e-2)(1, DType::f32, o.device, train);
  Generator data(2);
  double loss = 0;
  const std::int64_t steps = o.steps > 0 ? o.steps : 120;  // it learns the task past ~100
  for (std::int64_t s = 0; s < steps; ++s) {
    std::vector<zoo::Batch> batches;
    for (int m = 0; m < 2; ++m)
      batches.push_back(zoo::language_batch(config.vocab, config.seq_len, zoo::kMicroBatch, data)
                            .to(o.device, DType::f32));
    loss = run->step(batches);
  }
  print_trained("llama", steps, o.device, loss);
  auto& model = static_cast<zoo::Llama&>(run->module());
  model.eval();
  quantize_if_asked(model, "llama", o);
  return decode<zoo::LlamaKvCache>("llama", model, config, o);
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  try {
    bool same = true;
    if (o.model == "gpt" || o.model == "all") same = run_gpt(o) && same;
    if (o.model == "llama" || o.model == "all") same = run_llama(o) && same;
    return same ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "generate: %s\n", e.what());
    return 1;
  }
}
