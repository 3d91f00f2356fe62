// What one decoded token costs: the demo GPT (GPT-2's architecture, demos/gpt_decode.h) and the
// zoo's Llama-style model (demos/zoo/llama_decode.h) decoding from a static KV cache, at B = 1 and
// B = 8, with CUDA graphs on and off, with the model's weights and weight-only int8
// (nn::quantize_int8: every Linear; the Llama-style model's tied LM head is held apart as a Linear
// of its own, so that it is quantized too, as gpt-fast quantizes Llama's output layer). The
// compiled token step is the model's forward_cached, the greedy argmax and the next cache row, so a
// warm token can be one graph launch. Per token:
//   - graph launches, kernel launches and cuBLASLt calls;
//   - the arguments copied into a graph's buffers and the outputs handed over;
//   - host us: the whole call on the host, the virtual GPU's interpreter off (its launches are
//     checked and counted, not run, as a real GPU's are queued);
//   - DRAM bytes (the profiler's distinct sectors of the generated kernels plus cuBLASLt's operand
//     bytes) against the ideal: every weight once (an embedding table only at the rows it gives),
//     the live KV cache once, the new keys and values and the logits written once;
//   - the modeled H100 tokens/s: the profiler's roofline per kernel (3 us launch latency each),
//     cuBLASLt's operand bytes at the modeled bandwidth plus the same latency per call.
// The bytes and the modeled time are the graphs-off run's (the same plans: a replay's library
// calls are not counted); on a real GPU they print as -, and tokens/s is measured (each run's
// tokens timed to a synchronization).
// Checks the targets: 1 graph launch per token, DRAM <= 1.10x ideal, host <= 10 us per token with
// graphs, int8 moving <= 0.55x the bytes of the model's dtype, and prints MISS where one is
// missed; exits 0 regardless.
//
//   bench_generate [--size tiny|gpt2-small] [--dtype bf16|f32] [--tokens N] [--prompt N]
//                  [--batches 1,8] [--models gpt,llama] [--graphs on|off|both]
//                  [--int8 on|off|both] [--csv PATH] [--kernels]
//     --size tiny        d_model 256, 4 layers, vocab 4096 (the default: a few minutes on the
//                        virtual GPU, which interprets the skinny GEMMs' every weight)
//     --size gpt2-small  GPT-2 small (d_model 768, 12 layers, 12 heads, vocab 50257) and a
//                        Llama-style model of the same width (12 heads over 4 key / value heads);
//                        most of an hour on the virtual GPU (--graphs off --tokens 2: ~20 min)
//     --graphs on|off    one mode only (the bytes and modeled time come from off)
//     --int8 on|off      int8 weights only, or the model's dtype only (both by default)
//     --csv PATH         also writes the rows there (model, batch, weights, graphs, launches,
//                        ms per token: measured on a GPU, modeled on the virtual one)
//     --kernels          prints the virtual GPU's profile of each graphs-off run's tokens, per
//                        kernel: DRAM, issue slots, the modeled time and what bounds it
// KILN_BENCH_REPS: the host-time calls per figure (default 400).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "demos/gpt_decode.h"
#include "demos/zoo/llama_decode.h"
#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/lt_matmul.h"
#include "jit/compile.h"
#include "runtime/cuda/virtual/profiler.h"
#include "runtime/cuda/virtual/virtual_backend.h"
#include "runtime/cuda_backend.h"

using namespace kiln;
namespace codegen = kiln::jit::codegen;
namespace vgpu = kiln::cuda::vgpu;

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string size = "tiny";
  DType dtype = DType::bf16;
  std::int64_t tokens = 6, prompt = 16;
  std::vector<std::int64_t> batches{1, 8};
  std::vector<std::string> models{"gpt", "llama"};
  std::string graphs = "both";  // on, off or both
  std::string int8 = "both";    // on, off or both
  std::string csv;              // a file for the rows, or none
  bool kernels = false;         // print each profiled run's kernels (the virtual GPU's table)
};

// A model ready to decode: its compiled token step over its own cache, and what it reads ideally.
struct Decoder {
  std::string name;
  std::int64_t vocab = 0, layers = 0, kv_width = 0;  // kv_width: key (= value) width per layer
  std::int64_t weight_bytes = 0;     // every weight once, embedding tables at one row (B = 1)
  std::int64_t table_row_bytes = 0;  // what each more sequence adds: its token's table row
  // (tokens [B, T], rows [T], starts [B]) -> {next tokens [B, 1], next row [1]}
  std::function<std::vector<Tensor>(const Tensor&, const Tensor&, const Tensor&)> step;
};

// The greedy token and the next cache row after `logits` [B, T, vocab] at `rows` [T].
std::vector<Tensor> next_token(const Tensor& logits, const Tensor& rows) {
  Tensor next = unsqueeze(argmax(select(logits, 1, logits.shape()[1] - 1), -1), 1);
  Tensor row = select(rows, 0, rows.shape()[0] - 1) + scalar_tensor(1, DType::i64);
  return {next, unsqueeze(row, 0)};
}

// Every parameter once (tied ones once), the tables in `tables` counted at one row; those in
// `per_sequence` at one more row for each sequence past the first (a position table is read at
// the one position every sequence is at).
template <typename Model>
void count_weights(Model& model, const std::set<const void*>& tables,
                   const std::set<const void*>& per_sequence, Decoder& d) {
  std::set<const void*> seen;
  std::vector<std::pair<std::string, Tensor>> weights = model.named_parameters();
  for (const auto& [name, m] : model.named_modules())  // int8 weights and scales are buffers
    if (const auto* linear = dynamic_cast<const nn::Linear*>(m); linear && linear->quantized()) {
      weights.emplace_back(name + ".weight", linear->weight);
      weights.emplace_back(name + ".weight_scale", linear->weight_scale);
    }
  for (const auto& [name, p] : weights) {
    if (!seen.insert(p.raw_data()).second) continue;
    if (!tables.count(p.raw_data())) {
      d.weight_bytes += codegen::tensor_bytes(p);
      continue;
    }
    const std::int64_t row = codegen::tensor_bytes(p) / p.shape()[0];
    d.weight_bytes += row;
    if (per_sequence.count(p.raw_data())) d.table_row_bytes += row;
  }
}

// `forward(cache, tokens, rows, starts)` -> logits.
template <typename Cache, typename Config, typename Forward>
Decoder make_decoder(const Config& config, std::int64_t batch, DType dtype, bool graphs,
                     const std::string& name, Forward forward) {
  auto cache = std::make_shared<Cache>(config, batch, Device::cuda(), dtype);
  jit::CompileOptions options;
  options.name = name + "_token";
  options.cuda_graphs = graphs;
  auto f = jit::compile(
      [forward, cache](const Tensor& t, const Tensor& r, const Tensor& s) {
        return next_token(forward(*cache, t, r, s), r);
      },
      options);
  Decoder d;
  d.name = name;
  d.step = [f](const Tensor& t, const Tensor& r, const Tensor& s) mutable { return f(t, r, s); };
  return d;
}

struct Models {
  std::shared_ptr<gpt::Gpt> gpt;
  gpt::GptConfig gpt_config;
  std::shared_ptr<zoo::Llama> llama;
  zoo::LlamaConfig llama_config;
  std::shared_ptr<nn::Linear> llama_head;  // int8: the tied head held apart, quantized
};

Models build_models(const Options& o, bool int8) {
  Models m;
  gpt::GptConfig& g = m.gpt_config;
  zoo::LlamaConfig& l = m.llama_config;
  if (o.size == "gpt2-small") {
    g.vocab = l.vocab = 50257;
    g.d_model = 768;
    g.heads = 12;
    g.layers = l.layers = 12;
    l.head_dim = 64;
    l.heads = 12;
    l.kv_heads = 4;
    l.mlp_hidden = 2048;
  } else {
    g.vocab = l.vocab = 4096;
    g.d_model = 256;
    g.heads = 4;
    g.layers = l.layers = 4;
    l.head_dim = 64;
    l.heads = 4;
    l.kv_heads = 2;
    l.mlp_hidden = 704;
  }
  g.seq_len = l.seq_len = o.prompt + o.tokens + 4;
  // Built and converted on the host, then moved: the device never runs the initialization.
  m.gpt = std::make_shared<gpt::Gpt>(g, 5, Device::cpu());
  m.gpt->to(o.dtype);
  if (int8) nn::quantize_int8(*m.gpt);
  m.gpt->to(Device::cuda());
  m.gpt->eval();
  m.llama = std::make_shared<zoo::Llama>(l, 3);
  m.llama->to(o.dtype);
  if (int8) {
    nn::quantize_int8(*m.llama);
    m.llama_head = std::make_shared<nn::Linear>(l.d_model(), l.vocab, false, o.dtype);
    m.llama_head->weight = m.llama->tok_embeddings.weight;
    m.llama_head->quantize_int8();
    m.llama_head->to(Device::cuda());
  }
  m.llama->to(Device::cuda());
  m.llama->eval();
  return m;
}

Decoder decoder_for(const Models& m, const std::string& which, std::int64_t batch, DType dtype,
                    bool graphs) {
  if (which == "gpt") {
    Decoder d = make_decoder<gpt::KvCache>(
        m.gpt_config, batch, dtype, graphs, "gpt",
        [model = m.gpt](const gpt::KvCache& cache, const Tensor& t, const Tensor& r,
                        const Tensor& s) { return forward_cached(*model, cache, t, r, s); });
    d.vocab = m.gpt_config.vocab;
    d.layers = m.gpt_config.layers;
    d.kv_width = m.gpt_config.d_model;
    const void* tokens = m.gpt->token_embedding.weight.raw_data();
    count_weights(*m.gpt, {tokens, m.gpt->position_embedding.weight.raw_data()}, {tokens}, d);
    return d;
  }
  Decoder d = make_decoder<zoo::LlamaKvCache>(
      m.llama_config, batch, dtype, graphs, "llama",
      [model = m.llama, head = m.llama_head](const zoo::LlamaKvCache& cache, const Tensor& t,
                                             const Tensor& r, const Tensor& s) {
        return forward_cached(*model, cache, t, r, s, head.get());
      });
  d.vocab = m.llama_config.vocab;
  d.layers = m.llama_config.layers;
  d.kv_width = m.llama_config.kv_heads * m.llama_config.head_dim;
  if (!m.llama_head) {
    count_weights(*m.llama, {}, {}, d);  // the token table is the tied LM head: read whole
    return d;
  }
  const void* tokens = m.llama->tok_embeddings.weight.raw_data();
  count_weights(*m.llama, {tokens}, {tokens}, d);  // the table at its rows, the head apart
  count_weights(*m.llama_head, {}, {}, d);
  return d;
}

struct TokenFigures {
  double graph_launches = 0, launches = 0, library_calls = 0, copies = 0;
  double host_us = 0;
  std::int64_t dram = 0, ideal = 0;
  double modeled_us = 0;
  double wall_us = 0;  // a measured token, synchronized (a real GPU's tokens/s)
};

// Prefill over a prompt of `prompt` tokens, then decode: two tokens to record the graphs, then
// `tokens` measured (counts, and the profiler's bytes where `profile`), then the median host time
// of KILN_BENCH_REPS more calls (400) with the interpreter off (on a GPU, at one cache row).
TokenFigures measure(Decoder& d, std::int64_t batch, const Options& o, DType dtype, bool profile) {
  NoGradGuard no_grad;  // inference: no backward is planned or recorded
  Generator gen(11);
  Tensor prompt = randint(0, d.vocab, {batch, o.prompt}, DType::i64, &gen, Device::cuda());
  Tensor starts = zeros({batch}, DType::i64, Device::cuda());
  auto out = d.step(prompt, arange(o.prompt).to(Device::cuda()), starts);
  for (int i = 0; i < 2; ++i) out = d.step(out[0], out[1], starts);  // warm, graphs recorded
  cuda::backend().synchronize();
  const std::int64_t live0 = o.prompt + 2;  // rows before the first measured token

  auto& s = codegen::launch_stats();
  auto& lt = codegen::lt_stats();
  const std::int64_t l0 = s.launches, g0 = s.graph_launches, c0 = lt.calls,
                     copies0 = s.graph_input_copies + s.graph_outputs_handed_over,
                     lib0 = lt.bytes_read + lt.bytes_written;
  if (profile) {
    vgpu::clear_profiles();
    vgpu::set_profiling(true);
  }
  auto t0 = Clock::now();
  for (std::int64_t n = 0; n < o.tokens; ++n) out = d.step(out[0], out[1], starts);
  cuda::backend().synchronize();
  TokenFigures f;
  f.wall_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
              static_cast<double>(o.tokens);
  const auto per = [&](std::int64_t v) { return static_cast<double>(v) / o.tokens; };
  f.launches = per(s.launches - l0);
  f.graph_launches = per(s.graph_launches - g0);
  f.library_calls = per(lt.calls - c0);
  f.copies = per(s.graph_input_copies + s.graph_outputs_handed_over - copies0);
  const std::int64_t library = lt.bytes_read + lt.bytes_written - lib0;
  if (profile) {
    vgpu::set_profiling(false);
    if (o.kernels) std::printf("%s", vgpu::profile_table(vgpu::profiles()).c_str());
    std::int64_t kernels = 0;
    double us = 0;
    for (const auto& p : vgpu::profiles()) {
      kernels += static_cast<std::int64_t>(p.dram_bytes());
      us += p.modeled_h100_us();
    }
    vgpu::clear_profiles();
    f.dram = (kernels + library) / o.tokens;
    f.modeled_us = (us + static_cast<double>(library) / vgpu::kModeledDramBytesPerSecond * 1e6 +
                    3.0 * static_cast<double>(lt.calls - c0)) /
                   static_cast<double>(o.tokens);
  }
  // The ideal: weights once, the live cache read once (its mean length over the tokens), the new
  // keys and values and the logits written once.
  const std::int64_t elem = static_cast<std::int64_t>(itemsize(dtype));
  const std::int64_t mean_live = live0 + (o.tokens + 1) / 2;
  f.ideal = d.weight_bytes + (batch - 1) * d.table_row_bytes +
            2 * d.layers * batch * d.kv_width * elem * (mean_live + 1) + batch * d.vocab * elem;

  const bool is_virtual = cuda::backend().properties(0).is_virtual;
  const bool executed = is_virtual ? vgpu::set_kernel_execution(false) : true;
  std::vector<double> host;  // nothing runs: as many calls as a steady median wants
  const char* reps = std::getenv("KILN_BENCH_REPS");
  const int calls = reps ? std::max(1, std::atoi(reps)) : 400;
  // One cache row over and over: a GPU runs these calls, and the cache has no rows past them.
  const Tensor row = out[1].clone();
  for (int n = 0; n < 50; ++n) out = d.step(out[0], row, starts);  // caches and pages warm
  for (int n = 0; n < calls; ++n) {
    auto t0 = Clock::now();
    out = d.step(out[0], row, starts);
    host.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  if (is_virtual) vgpu::set_kernel_execution(executed);
  std::sort(host.begin(), host.end());
  f.host_us = host[host.size() / 2];
  return f;
}

std::string mb(std::int64_t bytes) {
  return fmt::format("{:.2f} MB", static_cast<double>(bytes) / 1e6);
}

Options parse(int argc, char** argv) {
  Options o;
  std::string dtype = "bf16";
  CLI::App app{"What one decoded token costs, with CUDA graphs on and off", "bench_generate"};
  app.add_option("--size", o.size, "tiny or gpt2-small")
      ->check(CLI::IsMember({"tiny", "gpt2-small"}));
  app.add_option("--dtype", dtype, "bf16 or f32")->check(CLI::IsMember({"bf16", "f32"}));
  app.add_option("--tokens", o.tokens, "decoded tokens measured")->check(CLI::PositiveNumber);
  app.add_option("--prompt", o.prompt, "prompt tokens")->check(CLI::PositiveNumber);
  app.add_option("--batches", o.batches, "batch sizes")->delimiter(',');
  app.add_option("--graphs", o.graphs, "on, off or both (the DRAM figures come from off)")
      ->check(CLI::IsMember({"on", "off", "both"}));
  app.add_option("--csv", o.csv, "also write the rows to this CSV file");
  app.add_flag("--kernels", o.kernels, "print the profiled tokens' kernels (virtual GPU)");
  app.add_option("--int8", o.int8, "on, off or both: weight-only int8, the model's dtype")
      ->check(CLI::IsMember({"on", "off", "both"}));
  app.add_option("--models", o.models, "gpt, llama")
      ->delimiter(',')
      ->check(CLI::IsMember({"gpt", "llama"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
  o.dtype = dtype == "bf16" ? DType::bf16 : DType::f32;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  const bool is_virtual = cuda::backend().properties(0).is_virtual;
  std::printf("decoding, per token: %s models in %s, prompt %lld, %lld tokens measured, on %s\n",
              o.size.c_str(), std::string(dtype_name(o.dtype)).c_str(),
              static_cast<long long>(o.prompt), static_cast<long long>(o.tokens),
              std::string(cuda::backend().kind()).c_str());
  std::vector<bool> int8_modes;
  if (o.int8 != "on") int8_modes.push_back(false);
  if (o.int8 != "off") int8_modes.push_back(true);
  std::FILE* csv = o.csv.empty() ? nullptr : std::fopen(o.csv.c_str(), "w");
  if (!o.csv.empty() && !csv) {
    std::fprintf(stderr, "bench_generate: cannot write %s\n", o.csv.c_str());
    return 2;
  }
  if (csv)
    std::fprintf(csv,
                 "model,batch,weights,graphs,graph_launches,launches,library_calls,host_us,"
                 "dram_bytes,ideal_bytes,ms_per_token,measured\n");
  std::vector<Models> models;
  for (bool int8 : int8_modes) models.push_back(build_models(o, int8));
  std::printf("%-6s %3s %7s %6s %7s %8s %7s %7s %9s %11s %11s %7s %10s\n", "model", "B", "weights",
              "graphs", "graph", "kernels", "cuBLAS", "copies", "host us", "DRAM", "ideal",
              "x ideal", is_virtual ? "H100 tok/s" : "tok/s");
  for (const std::string& which : o.models)
    for (std::int64_t batch : o.batches) {
      std::map<bool, std::int64_t> dram_of;  // per int8 mode: the graphs-off run's bytes
      for (std::size_t mode = 0; mode < int8_modes.size(); ++mode) {
        const bool int8 = int8_modes[mode];
        const std::string weights = int8 ? "int8" : std::string(dtype_name(o.dtype));
        TokenFigures off, on;
        for (bool graphs : {false, true}) {
          if (o.graphs != "both" && graphs != (o.graphs == "on")) continue;
          Decoder d = decoder_for(models[mode], which, batch, o.dtype, graphs);
          TokenFigures f = measure(d, batch, o, o.dtype, /*profile=*/is_virtual && !graphs);
          (graphs ? on : off) = f;
          // The same plans either way; a replay's library calls are not counted, so the bytes
          // and the modeled time are the graphs-off run's.
          const TokenFigures& bytes = off;
          const bool have_bytes = is_virtual && bytes.dram > 0;
          const double ratio = static_cast<double>(bytes.dram) / static_cast<double>(bytes.ideal);
          std::printf("%-6s %3lld %7s %6s %7.1f %8.1f %7.1f %7.1f %9.1f %11s %11s %7.2f %10s\n",
                      d.name.c_str(), static_cast<long long>(batch), weights.c_str(),
                      graphs ? "on" : "off", f.graph_launches, f.launches, f.library_calls,
                      f.copies, f.host_us, have_bytes ? mb(bytes.dram).c_str() : "-",
                      mb(f.ideal).c_str(), have_bytes ? ratio : 0.0,
                      have_bytes   ? fmt::format("{:.0f}", 1e6 / bytes.modeled_us).c_str()
                      : is_virtual ? "-"
                                   : fmt::format("{:.0f}", 1e6 / f.wall_us).c_str());
          if (csv) {
            const double us = is_virtual ? bytes.modeled_us : f.wall_us;
            std::fprintf(csv, "%s,%lld,%s,%s,%.2f,%.2f,%.2f,%.2f,%lld,%lld,%s,%d\n", d.name.c_str(),
                         static_cast<long long>(batch), weights.c_str(), graphs ? "on" : "off",
                         f.graph_launches, f.launches, f.library_calls, f.host_us,
                         static_cast<long long>(bytes.dram), static_cast<long long>(f.ideal),
                         us > 0 ? fmt::format("{:.4f}", us / 1e3).c_str() : "", is_virtual ? 0 : 1);
          }
        }
        const double ratio = static_cast<double>(off.dram) / static_cast<double>(off.ideal);
        const bool graphed = o.graphs != "off";
        if (graphed && on.graph_launches + on.launches > 1.0 + 1e-9)
          std::printf("  MISS: %.1f launches per token with graphs (target 1)\n",
                      on.graph_launches + on.launches);
        if (off.dram > 0 && ratio > 1.10)
          std::printf("  MISS: DRAM %.2fx the ideal (target 1.10x)\n", ratio);
        if (graphed && on.host_us > 10.0)
          std::printf("  MISS: host %.1f us per token with graphs (target 10)\n", on.host_us);
        if (off.dram > 0) dram_of[int8] = off.dram;
      }
      if (dram_of.size() == 2) {
        const double ratio =
            static_cast<double>(dram_of[true]) / static_cast<double>(dram_of[false]);
        std::printf("  %s B=%lld: int8 moves %.2fx the %s bytes (target 0.55x)%s\n", which.c_str(),
                    static_cast<long long>(batch), ratio, std::string(dtype_name(o.dtype)).c_str(),
                    ratio > 0.55 ? " MISS" : "");
      }
    }
  if (csv) std::fclose(csv);
  return 0;
}
