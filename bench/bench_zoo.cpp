// The cost of a warm training step of each model of the zoo (demos/zoo/catalog.h: GPT-2, Llama at
// head dims 8 and 16, ViT, MLP-Mixer, GPT-NeoX, BERT), eagerly and with the loss compiled, on the
// CUDA device (the virtual GPU here). Per model and mode, for the forward + backward of one step
// (every micro-batch: Llama accumulates two): generated-kernel launches, cuBLASLt calls, DRAM bytes
// (the virtual GPU profiler's distinct sectors of the generated kernels, plus the library's operand
// bytes), the bytes the first micro-batch's forward leaves allocated for its backward, and the
// step's peak device memory (compiled: with its largest plan arena against that arena's liveness
// bound); the optimizer (fused AdamW) apart. Then compiled / eager and whether each meets its
// target: at least 5x fewer generated launches, at most 0.5x the DRAM bytes, no more held for
// the backward, no higher peak.
// The models that train with dropout (GPT-2, BERT) are measured compiled without it too: dropout
// must cost no launch and no byte held for the backward. And with dropout everywhere but on the
// attention probabilities, which tells what the attention's dropout costs apart. Prints MISS
// where a target is missed; exits 0 regardless.
//
//   bench_zoo [--autocast bf16] [--layers N] [--models a,b] [--table]
//     --autocast bf16  forward and loss under autocast(bf16)
//     --layers N       blocks per model (default 2)
//     --models a,b     only the models whose names contain one of the words (e.g. llama)
//     --table          each compiled step's per-kernel profile (the profiler's table) on stderr,
//                      also without dropout for the models that have it
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "demos/zoo/catalog.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/lt_matmul.h"
#include "jit/plan_arena.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/blaslt/blaslt.h"
#include "runtime/cuda/virtual/profiler.h"
#include "runtime/cuda_backend.h"

using namespace kiln;

namespace {

struct StepFigures {
  std::int64_t launches = 0, library_calls = 0;  // forward + backward
  std::int64_t dram = 0;                         // forward + backward: kernels + library operands
  std::int64_t held_for_backward = 0;            // after the first micro-batch's forward
  // The most device memory allocated at once during the forwards and backwards, above what was
  // allocated before them; compiled, the largest plan arena lent and its liveness bound.
  std::int64_t peak_memory = 0, arena = 0, arena_bound = 0;
  std::int64_t optimizer_launches = 0, optimizer_dram = 0;
  // Compiled: ops the plans ran through dispatch (codegen::LaunchStats::plan_dispatches).
  std::int64_t plan_dispatches = 0;
  std::vector<std::pair<std::string, std::int64_t>> top_kernels;  // forward + backward, by launches
};

std::int64_t library_bytes() {
  return jit::codegen::lt_stats().bytes_read.load() + jit::codegen::lt_stats().bytes_written.load();
}
std::int64_t launches() {
  return jit::codegen::launch_stats().launches.load();
}

// The generated kernels' DRAM bytes since the profiles were cleared, and their launches by name.
std::int64_t kernel_dram(std::map<std::string, std::int64_t>* by_name = nullptr) {
  std::int64_t bytes = 0;
  for (const auto& p : cuda::vgpu::profiles()) {
    bytes += static_cast<std::int64_t>(p.dram_bytes());
    if (by_name) (*by_name)[p.kernel] += static_cast<std::int64_t>(p.launches);
  }
  return bytes;
}

// `variant` names the entry's dropout in the profile table's title.
StepFigures measure(const zoo::CatalogEntry& entry, bool compiled, std::optional<DType> autocast,
                    bool table, const char* variant = "") {
  zoo::TrainOptions options;
  options.compiled = compiled;
  options.autocast = autocast;
  options.name = entry.name;
  auto run = entry.start(1, DType::f32, Device::cuda(), options);
  Generator data(2);
  const std::vector<zoo::Batch> micro_batches = entry.step_batches(data, Device::cuda());
  for (int i = 0; i < 3; ++i) run->step(micro_batches);  // compiled, allocator settled

  StepFigures out;
  auto& alloc = cuda_allocator();
  const std::int64_t launches0 = launches(), calls0 = jit::codegen::lt_stats().calls.load(),
                     lib0 = library_bytes(),
                     dispatches0 = jit::codegen::launch_stats().plan_dispatches.load();
  cuda::vgpu::clear_profiles();
  cuda::vgpu::set_profiling(true);
  // What zoo::Trainer::forward_backward does, with the first forward measured on its own.
  run->module().zero_grad();
  alloc.reset_peak();
  jit::reset_arena_stats();
  const std::size_t start = alloc.stats().allocated;
  for (std::size_t i = 0; i < micro_batches.size(); ++i) {
    const std::size_t before = alloc.stats().allocated;
    Tensor loss = run->forward(micro_batches[i]);
    if (i == 0) out.held_for_backward = static_cast<std::int64_t>(alloc.stats().allocated - before);
    loss.backward();
  }
  // Beside the cuBLASLt workspace, which each call takes and gives back (both modes make them).
  const auto workspace =
      static_cast<std::int64_t>(jit::codegen::lt_stats().calls.load() > calls0
                                    ? cuda::blaslt::service(cuda::backend()).workspace_bytes()
                                    : 0);
  out.peak_memory = static_cast<std::int64_t>(alloc.stats().peak_allocated - start) - workspace;
  out.arena = jit::arena_stats().largest_bytes;
  out.arena_bound = jit::arena_stats().largest_live_bound;
  cuda::vgpu::set_profiling(false);
  out.launches = launches() - launches0;
  out.plan_dispatches = jit::codegen::launch_stats().plan_dispatches.load() - dispatches0;
  out.library_calls = jit::codegen::lt_stats().calls.load() - calls0;
  std::map<std::string, std::int64_t> by_name;
  out.dram = kernel_dram(&by_name) + library_bytes() - lib0;
  if (table && compiled)
    std::fprintf(stderr, "%s%s, compiled forward + backward, per kernel:\n%s\n", entry.name.c_str(),
                 variant, cuda::vgpu::profile_table(cuda::vgpu::profiles()).c_str());
  out.top_kernels.assign(by_name.begin(), by_name.end());
  std::stable_sort(out.top_kernels.begin(), out.top_kernels.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });

  cuda::vgpu::clear_profiles();
  cuda::vgpu::set_profiling(true);
  const std::int64_t launches1 = launches(), lib1 = library_bytes();
  run->optimizer_step();
  cuda::vgpu::set_profiling(false);
  out.optimizer_launches = launches() - launches1;
  out.optimizer_dram = kernel_dram() + library_bytes() - lib1;
  cuda::vgpu::clear_profiles();
  return out;
}

std::string kb(std::int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f kB", static_cast<double>(bytes) / 1e3);
  return b;
}

double ratio(double a, double b) {
  return b > 0 ? a / b : 0.0;
}

struct Result {
  std::string name;
  StepFigures eager, compiled;
  // Compiled, for the models with dropout: without it, and without it on the probabilities only.
  std::optional<StepFigures> no_dropout, no_attention_dropout;
};

void print_row(const char* label, const std::string& a, const std::string& b, double x) {
  std::printf("  %-34s %14s %14s %7.2fx\n", label, a.c_str(), b.c_str(), x);
}

// The forward + backward figures of `a` and `b` side by side, and b / a.
void print_pair(const char* a_label, const char* b_label, const StepFigures& a,
                const StepFigures& b) {
  std::printf("  %-34s %14s %14s %8s\n", "", a_label, b_label, "ratio");
  print_row("generated launches", std::to_string(a.launches), std::to_string(b.launches),
            ratio(b.launches, a.launches));
  print_row("cuBLASLt calls", std::to_string(a.library_calls), std::to_string(b.library_calls),
            ratio(b.library_calls, a.library_calls));
  print_row("DRAM (kernels + library operands)", kb(a.dram), kb(b.dram), ratio(b.dram, a.dram));
  print_row("held for the backward", kb(a.held_for_backward), kb(b.held_for_backward),
            ratio(b.held_for_backward, a.held_for_backward));
  print_row("peak device memory (no workspace)", kb(a.peak_memory), kb(b.peak_memory),
            ratio(b.peak_memory, a.peak_memory));
  if (b.arena > 0) {
    std::printf("  %-34s %14s %14lld\n", "ops the plans dispatched", "",
                static_cast<long long>(b.plan_dispatches));
    print_row("largest plan arena / liveness bound", kb(b.arena), kb(b.arena_bound),
              ratio(b.arena, b.arena_bound));
  }
}

void print_model(const Result& r) {
  std::printf("\n%s: warm step, forward + backward (%s)\n", r.name.c_str(),
              r.name.rfind("llama", 0) == 0 ? "two micro-batches" : "one batch");
  const StepFigures &e = r.eager, &c = r.compiled;
  print_pair("eager", "compiled", e, c);
  print_row("optimizer: generated launches", std::to_string(e.optimizer_launches),
            std::to_string(c.optimizer_launches),
            ratio(c.optimizer_launches, e.optimizer_launches));
  print_row("optimizer: DRAM", kb(e.optimizer_dram), kb(c.optimizer_dram),
            ratio(c.optimizer_dram, e.optimizer_dram));
  if (r.no_dropout) {
    std::printf("  compiled:\n");
    print_pair("no dropout", "dropout", *r.no_dropout, c);
    std::printf("  compiled, dropout everywhere but on the attention probabilities:\n");
    print_pair("no dropout", "not on probs", *r.no_dropout, *r.no_attention_dropout);
  }
  std::printf("  compiled forward + backward, most launched kernels:");
  for (std::size_t i = 0; i < std::min<std::size_t>(6, c.top_kernels.size()); ++i)
    std::printf("%s %s x%lld", i ? "," : "", c.top_kernels[i].first.c_str(),
                static_cast<long long>(c.top_kernels[i].second));
  std::printf("\n");
}

// The compiled / eager targets of each model; returns how many it missed.
int print_compiled_targets(const std::vector<Result>& results) {
  std::printf(
      "\nCompiled per warm forward + backward (launches: compiled/eager) and its ratio to eager;\n"
      "targets: launches <= 0.20x (5x fewer), DRAM <= 0.50x, held for the backward <= 1.00x,\n"
      "peak device memory <= 1.00x\n");
  std::printf("%-12s %9s %9s %-5s %11s %11s %-5s %11s %11s %-5s %11s %11s %-5s\n", "model",
              "launches", "ratio", "", "DRAM", "ratio", "", "held", "ratio", "", "peak", "ratio",
              "");
  int misses = 0;
  for (const Result& r : results) {
    auto verdict = [&](double x, double bound) {
      const bool ok = x <= bound;
      misses += ok ? 0 : 1;
      return ok ? "ok" : "MISS";
    };
    const double l = ratio(r.compiled.launches, r.eager.launches);
    const double d = ratio(r.compiled.dram, r.eager.dram);
    const double h = ratio(r.compiled.held_for_backward, r.eager.held_for_backward);
    const double m = ratio(r.compiled.peak_memory, r.eager.peak_memory);
    const std::string launches_pair =
        std::to_string(r.compiled.launches) + "/" + std::to_string(r.eager.launches);
    std::printf("%-12s %9s %8.2fx %-5s %11s %10.2fx %-5s %11s %10.2fx %-5s %11s %10.2fx %-5s\n",
                r.name.c_str(), launches_pair.c_str(), l, verdict(l, 0.2),
                kb(r.compiled.dram).c_str(), d, verdict(d, 0.5),
                kb(r.compiled.held_for_backward).c_str(), h, verdict(h, 1.0),
                kb(r.compiled.peak_memory).c_str(), m, verdict(m, 1.0));
  }
  return misses;
}

// With dropout against without, for the models with dropout; returns how many targets it
// missed and adds its targets to `targets`.
int print_dropout_targets(const std::vector<Result>& results, std::size_t& targets) {
  int misses = 0;
  std::printf(
      "\nDropout, compiled: with / without it, per warm forward + backward; targets: equal.\n"
      "Then the same with dropout everywhere but on the attention probabilities (no target)\n");
  std::printf("%-12s %13s %-5s %23s %-5s %13s %23s\n", "model", "launches", "", "held", "",
              "not on probs", "held");
  for (const Result& r : results) {
    if (!r.no_dropout) continue;
    const StepFigures &with = r.compiled, &without = *r.no_dropout, &most = *r.no_attention_dropout;
    auto verdict = [&](std::int64_t a, std::int64_t b) {
      misses += a == b ? 0 : 1;
      return a == b ? "ok" : "MISS";
    };
    auto pair = [](const std::string& a, const std::string& b) { return a + "/" + b; };
    const std::string none_launches = std::to_string(without.launches),
                      none_held = kb(without.held_for_backward);
    std::printf("%-12s %13s %-5s %23s %-5s %13s %23s\n", r.name.c_str(),
                pair(std::to_string(with.launches), none_launches).c_str(),
                verdict(with.launches, without.launches),
                pair(kb(with.held_for_backward), none_held).c_str(),
                verdict(with.held_for_backward, without.held_for_backward),
                pair(std::to_string(most.launches), none_launches).c_str(),
                pair(kb(most.held_for_backward), none_held).c_str());
    targets += 2;
  }
  return misses;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<DType> autocast;
  std::int64_t layers = 2;
  bool table = false;
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--autocast" && i + 1 < argc && std::string(argv[i + 1]) == "bf16") {
      autocast = DType::bf16;
      ++i;
    } else if (arg == "--layers" && i + 1 < argc && std::atoi(argv[i + 1]) > 0) {
      layers = std::atoi(argv[++i]);
    } else if (arg == "--models" && i + 1 < argc) {
      std::string list = argv[++i];
      for (std::size_t start = 0, comma; start <= list.size(); start = comma + 1) {
        comma = std::min(list.find(',', start), list.size());
        if (comma > start) only.push_back(list.substr(start, comma - start));
      }
    } else if (arg == "--table") {
      table = true;
    } else {
      std::fprintf(stderr,
                   "usage: bench_zoo [--autocast bf16] [--layers N] [--models a,b] [--table]\n");
      return 2;
    }
  }
  // A cache directory of this run's own, so no stale kernel of another build is timed.
  std::filesystem::path cache =
      std::filesystem::temp_directory_path() / ("kiln-bench-zoo-" + std::to_string(getpid()));
  setenv("KILN_CACHE_DIR", cache.c_str(), 1);

  std::printf("Model zoo training steps on %s, %lld layers, %s, micro-batches of %lld\n",
              Device::cuda().str().c_str(), static_cast<long long>(layers),
              autocast ? "autocast(bf16)" : "f32", static_cast<long long>(zoo::kMicroBatch));
  std::vector<Result> results;
  for (const zoo::CatalogEntry& entry : zoo::catalog(layers)) {
    auto named = [&](const std::string& word) {
      return entry.name.find(word) != std::string::npos;
    };
    if (!only.empty() && std::none_of(only.begin(), only.end(), named)) continue;
    Result r{entry.name, measure(entry, false, autocast, table),
             measure(entry, true, autocast, table), std::nullopt, std::nullopt};
    if (auto plain = zoo::with_dropout(entry.name, layers, 0, 0)) {
      r.no_dropout = measure(*plain, true, autocast, table, " without dropout");
      r.no_attention_dropout = measure(*zoo::with_dropout(entry.name, layers, zoo::kZooDropout, 0),
                                       true, autocast, table, " without attention dropout");
    }
    print_model(r);
    results.push_back(std::move(r));
  }

  std::size_t targets = 4 * results.size();
  int misses = print_compiled_targets(results);
  misses += print_dropout_targets(results, targets);
  std::printf("%d of %zu targets missed\n", misses, targets);
  std::filesystem::remove_all(cache);
  return 0;
}
