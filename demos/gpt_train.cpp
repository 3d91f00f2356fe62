// Trains the small GPT of demos/gpt_model.h (token + position embeddings, pre-LN blocks with
// causal self-attention and a GELU MLP, cross-entropy, AdamW with warmup + cosine, gradient
// clipping) on its synthetic task: the target at each position is a fixed permutation of the
// previous token. Prints the loss as it trains, then per run what a step
// cost: kernel launches and library calls, DRAM bytes (measured by the virtual GPU's profiler),
// peak device memory, compile time and host time. `--compare` trains eagerly and compiled from
// the same initialization on the same batches and prints both columns and how far their losses
// drift apart. `--autocast bf16|f16` runs the forward and the loss under autocast (low-precision
// matmuls, f32 parameters, norms and loss; f16 with loss scaling). Per step it prints launches
// split into forward, backward and optimizer, and the host syncs. Exits 1 when a run of at least
// the default step count misses the target loss. `--ddp` trains data-parallel under `kiln launch
// -n N` (demos/gpt_ddp.h): the same loss curve as one process on the whole batch.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "demos/gpt_ddp.h"
#include "demos/gpt_model.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/lt_matmul.h"
#include "runtime/cuda/backend.h"
#include "runtime/cuda/blaslt/blaslt.h"
#include "runtime/cuda/host_sync.h"
#include "runtime/cuda/virtual/profiler.h"
#include "runtime/cuda_backend.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

using gpt::kTargetLoss;

struct DemoOptions {
  gpt::GptConfig model;
  gpt::TrainConfig train;
  Device device = Device::cpu();
  enum class Mode { eager, compiled, compare } mode = Mode::eager;
  std::int64_t log_every = 10;
  std::int64_t eval_batch = 256;
  std::string export_dir;  // --export: initial weights and per-step figures for bench/peers
  bool ddp = false;        // --ddp: one rank of `kiln launch -n N`
};

void usage(FILE* out) {
  gpt::GptConfig m;
  gpt::TrainConfig t;
  std::fprintf(out,
               "usage: gpt_train [--device cpu|cuda] [--compile | --compare] [--steps N]\n"
               "                 [--batch N] [--lr X] [--vocab N] [--seq-len N] [--d-model N]\n"
               "                 [--heads N] [--layers N] [--log-every N] [--seed N]\n"
               "                 [--autocast bf16|f16] [--ddp]\n"
               "  --device     where to train (default cpu; cuda is the virtual GPU without one)\n"
               "  --autocast   forward and loss under autocast: bf16 or f16 matmuls with f32\n"
               "               accumulation, f32 parameters, norms, softmax and loss (f16 with\n"
               "               a GradScaler: dynamic loss scale, overflowing steps skipped)\n"
               "  --compile    wrap the loss in jit::compile\n"
               "  --compare    train eager and compiled from the same init; print both\n"
               "  --ddp        data-parallel: run under `kiln launch -n N`, each rank on 1/N of\n"
               "               every batch (DistributedDataParallel over Gloo)\n"
               "  --steps      training steps (default %lld; the target loss %.2f is checked\n"
               "               when at least that many run)\n"
               "  --batch      sequences per step (default %lld)\n"
               "  --lr         peak learning rate (default %g)\n"
               "  --vocab, --seq-len, --d-model, --heads, --layers: model sizes (default %lld,\n"
               "               %lld, %lld, %lld, %lld)\n"
               "  --log-every  print the loss every N steps (default 10)\n"
               "  --seed       initialization seed (default %llu; data use seed + 1)\n"
               "  --export DIR write the initial weights (gpt_init.safetensors) and each run's\n"
               "               losses and step times (kiln_<mode>.json) for bench/peers\n",
               static_cast<long long>(t.steps), kTargetLoss, static_cast<long long>(t.batch), t.lr,
               static_cast<long long>(m.vocab), static_cast<long long>(m.seq_len),
               static_cast<long long>(m.d_model), static_cast<long long>(m.heads),
               static_cast<long long>(m.layers), static_cast<unsigned long long>(t.init_seed));
}

// Parses argv into `options`; false (after printing why) on a bad flag or value.
bool parse(int argc, char** argv, DemoOptions& options) {
  auto bad = [](const char* what) {
    std::fprintf(stderr, "gpt_train: %s\n", what);
    usage(stderr);
    return false;
  };
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      usage(stdout);
      std::exit(0);
    }
    if (flag == "--compile") {
      options.mode = DemoOptions::Mode::compiled;
      continue;
    }
    if (flag == "--compare") {
      options.mode = DemoOptions::Mode::compare;
      continue;
    }
    if (flag == "--ddp") {
      options.ddp = true;
      continue;
    }
    static const char* const kValueFlags[] = {
        "--device", "--lr",     "--steps",     "--batch", "--vocab",    "--seq-len", "--d-model",
        "--heads",  "--layers", "--log-every", "--seed",  "--autocast", "--export"};
    if (std::find(std::begin(kValueFlags), std::end(kValueFlags), flag) == std::end(kValueFlags))
      return bad(("unknown flag " + flag).c_str());
    if (i + 1 >= argc) return bad(("missing value after " + flag).c_str());
    std::string value = argv[++i];
    if (flag == "--device") {
      if (value == "cuda")
        options.device = Device::cuda();
      else if (value == "cpu")
        options.device = Device::cpu();
      else
        return bad(("unknown device '" + value + "' (cpu or cuda)").c_str());
      continue;
    }
    if (flag == "--export") {
      options.export_dir = value;
      continue;
    }
    if (flag == "--autocast") {
      if (value == "bf16")
        options.train.autocast = DType::bf16;
      else if (value == "f16")
        options.train.autocast = DType::f16;
      else
        return bad(("unknown autocast dtype '" + value + "' (bf16 or f16)").c_str());
      continue;
    }
    char* end = nullptr;
    if (flag == "--lr") {
      double lr = std::strtod(value.c_str(), &end);
      if (*end != '\0' || !(lr > 0) || !std::isfinite(lr))
        return bad(("--lr needs a positive number, not '" + value + "'").c_str());
      options.train.lr = lr;
      options.train.min_lr = lr / 10;
      continue;
    }
    long long n = std::strtoll(value.c_str(), &end, 10);
    if (end == value.c_str() || *end != '\0' || n < 1)
      return bad((flag + " needs a positive integer, not '" + value + "'").c_str());
    if (flag == "--steps")
      options.train.steps = n;
    else if (flag == "--batch")
      options.train.batch = n;
    else if (flag == "--vocab")
      options.model.vocab = n;
    else if (flag == "--seq-len")
      options.model.seq_len = n;
    else if (flag == "--d-model")
      options.model.d_model = n;
    else if (flag == "--heads")
      options.model.heads = n;
    else if (flag == "--layers")
      options.model.layers = n;
    else if (flag == "--log-every")
      options.log_every = n;
    else if (flag == "--seed") {
      options.train.init_seed = static_cast<std::uint64_t>(n);
      options.train.data_seed = static_cast<std::uint64_t>(n) + 1;
    }
  }
  if (options.model.vocab < 2) return bad("--vocab must be at least 2");
  if (options.model.seq_len < 2) return bad("--seq-len must be at least 2");
  if (options.model.d_model % options.model.heads != 0)
    return bad("--d-model must be a multiple of --heads");
  options.train.warmup_steps = std::max<std::int64_t>(1, options.train.steps / 10);
  return true;
}

bool on_virtual_gpu(Device device) {
  return device.is_cuda() && cuda::backend().kind() == "virtual";
}

// Counters of device work, read before and after what is measured.
struct WorkCounters {
  std::int64_t launches = 0, library_calls = 0, library_bytes = 0, nvrtc_compiles = 0, nvrtc_us = 0;
  std::int64_t host_syncs = 0;  // copies to the host and synchronizations: each makes the host wait
  static WorkCounters now() {
    auto& k = jit::codegen::launch_stats();
    auto& l = jit::codegen::lt_stats();
    auto& h = cuda::host_sync_stats();
    return {k.launches, l.calls,      l.bytes_read + l.bytes_written,
            k.compiles, k.compile_us, h.device_to_host_copies + h.synchronizations};
  }
  WorkCounters operator-(const WorkCounters& o) const {
    return {launches - o.launches,           library_calls - o.library_calls,
            library_bytes - o.library_bytes, nvrtc_compiles - o.nvrtc_compiles,
            nvrtc_us - o.nvrtc_us,           host_syncs - o.host_syncs};
  }
};

// DRAM bytes of `run`: what the profiler measured of the generated kernels plus the library
// calls' operands (each read or written once: the virtual GPU runs cuBLASLt on the host, where
// its traffic is not observed).
struct Dram {
  std::int64_t kernel_bytes = 0, library_bytes = 0;
  std::int64_t total() const { return kernel_bytes + library_bytes; }
};
template <typename Run>
Dram measure_dram(Run&& run) {
  namespace vgpu = cuda::vgpu;
  WorkCounters before = WorkCounters::now();
  const bool was_profiling = vgpu::profiling();
  // Profiles already recorded are kept: KILN_PROFILE's table and KILN_REPORT's pages read them.
  const std::size_t first = vgpu::profiles().size();
  vgpu::set_profiling(true);
  run();
  vgpu::set_profiling(was_profiling);
  Dram d;
  const auto& profiles = vgpu::profiles();
  for (std::size_t i = first; i < profiles.size(); ++i)
    d.kernel_bytes += static_cast<std::int64_t>(profiles[i].dram_bytes());
  d.library_bytes = (WorkCounters::now() - before).library_bytes;
  return d;
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

struct RunResult {
  std::vector<double> losses;
  std::vector<double> step_ms;  // host time of each step, loss read included
  double eval_loss = NAN;
  // warm: the mean over the steps after the first, less the one profiled
  double first_step_ms = 0, warm_step_ms = 0;
  // The step's parts: the loss (forward), its gradients (backward), and the optimizer
  // (clipping, AdamW, schedule).
  struct Phase {
    double launches_per_step = 0, library_calls_per_step = 0, host_syncs_per_step = 0, warm_ms = 0;
    std::optional<Dram> dram;  // one warm step, on the virtual GPU
  } forward, backward, optimizer;
  std::optional<std::size_t> peak_bytes;  // over the training steps
  std::size_t workspace_bytes = 0;        // the cuBLASLt workspace each library call borrows
  std::int64_t nvrtc_compiles = 0;
  double nvrtc_ms = 0;
  // The held-out evaluation (a forward without gradients): what the compiled function runs as
  // generated kernels today.
  WorkCounters eval_work;
  std::optional<Dram> eval_dram;
  std::optional<jit::CompiledStats> compiled_stats;
};

RunResult train(const DemoOptions& options, bool compiled) {
  const Device device = options.device;
  const bool profile = on_virtual_gpu(device);
  if (device.is_cuda()) {
    cuda_allocator().empty_cache();
    cuda_allocator().reset_peak();
  }
  std::printf("\n== %s on %s%s: %lld steps ==\n", compiled ? "compiled" : "eager",
              device.str().c_str(),
              !options.train.autocast                  ? ""
              : *options.train.autocast == DType::bf16 ? ", autocast bf16"
                                                       : ", autocast f16",
              static_cast<long long>(options.train.steps));
  RunResult r;
  WorkCounters start = WorkCounters::now();
  gpt::Trainer trainer(options.model, options.train, device, compiled);
  std::optional<gpt::DataParallel> ddp;
  if (options.ddp) ddp.emplace(trainer.model());
  std::int64_t params = 0;
  for (const auto& p : trainer.model().parameters()) params += p.numel();
  std::printf("parameters %lld\n", static_cast<long long>(params));
  if (!options.export_dir.empty()) {  // the same init for both modes: written once is enough
    trainer.model().save(options.export_dir + "/gpt_init.safetensors");
    if (device.is_cuda()) cuda::backend().synchronize();
  }

  // Step 1 is cold (tracing, kernel compiles); step 2 is profiled on the virtual GPU (the
  // profiler slows the interpreter); the rest are timed and counted.
  struct Tally {
    WorkCounters work{};
    double ms = 0;
  } tally[3];  // forward, backward, optimizer
  double timed_ms = 0;
  std::int64_t timed_steps = 0;
  for (std::int64_t step = 0; step < options.train.steps; ++step) {
    double loss = 0;
    if (step == 1 && profile) {
      Tensor l;
      r.forward.dram = measure_dram([&] { l = trainer.forward(); });
      r.backward.dram = measure_dram([&] { trainer.backward(l); });
      r.optimizer.dram = measure_dram([&] { trainer.optimizer_step(); });
      loss = ddp ? ddp->mean(l.item()) : l.item();
    } else {
      auto t0 = Clock::now();
      Tensor l;
      for (int part = 0; part < 3; ++part) {
        WorkCounters before = WorkCounters::now();
        auto h0 = Clock::now();
        if (part == 0)
          l = trainer.forward();
        else if (part == 1)
          trainer.backward(l);
        else
          trainer.optimizer_step();
        if (step == 0) continue;
        tally[part].ms += ms_since(h0);
        WorkCounters d = WorkCounters::now() - before;
        tally[part].work.launches += d.launches;
        tally[part].work.library_calls += d.library_calls;
        tally[part].work.host_syncs += d.host_syncs;
      }
      loss = ddp ? ddp->mean(l.item()) : l.item();  // one wait per step, outside the parts
      double ms = ms_since(t0);
      r.step_ms.push_back(ms);
      if (step == 0) {
        r.first_step_ms = ms;
      } else {
        timed_ms += ms;
        ++timed_steps;
      }
    }
    if (r.step_ms.size() < r.losses.size() + 1) r.step_ms.push_back(NAN);  // the profiled step
    r.losses.push_back(loss);
    if ((step + 1) % options.log_every == 0 || step == 0 || step + 1 == options.train.steps)
      std::printf("step %4lld  loss %.4f\n", static_cast<long long>(step + 1), loss);
    std::fflush(stdout);  // progress shows when piped, too
  }
  if (timed_steps > 0) {
    auto n = static_cast<double>(timed_steps);
    r.warm_step_ms = timed_ms / n;
    RunResult::Phase* phases[3] = {&r.forward, &r.backward, &r.optimizer};
    for (int part = 0; part < 3; ++part) {
      phases[part]->launches_per_step = static_cast<double>(tally[part].work.launches) / n;
      phases[part]->library_calls_per_step =
          static_cast<double>(tally[part].work.library_calls) / n;
      phases[part]->host_syncs_per_step = static_cast<double>(tally[part].work.host_syncs) / n;
      phases[part]->warm_ms = tally[part].ms / n;
    }
  }

  if (device.is_cuda()) {
    r.peak_bytes = cuda_allocator().stats().peak_allocated;
    // Every library call takes its workspace from the caching allocator for the call's duration,
    // so the peak holds one workspace (32 MiB on sm_90) next to the model's tensors.
    if ((WorkCounters::now() - start).library_calls > 0)
      r.workspace_bytes = cuda::CachingAllocator::round_size(
          cuda::blaslt::service(cuda_allocator().backend()).workspace_bytes());
  }

  // Held-out batch: fresh data from a seed the training stream never uses.
  Generator held_out(options.train.data_seed + 1000);
  gpt::TaskBatch eval =
      gpt::make_batch(options.model, options.eval_batch, options.model.seq_len, held_out, device);
  trainer.evaluate(eval);  // the first no-grad call traces and compiles its own entry
  WorkCounters before = WorkCounters::now();
  if (profile)
    r.eval_dram = measure_dram([&] { r.eval_loss = trainer.evaluate(eval); });
  else
    r.eval_loss = trainer.evaluate(eval);
  r.eval_work = WorkCounters::now() - before;

  WorkCounters total = WorkCounters::now() - start;
  r.nvrtc_compiles = total.nvrtc_compiles;
  r.nvrtc_ms = static_cast<double>(total.nvrtc_us) / 1e3;
  if (trainer.compiled()) r.compiled_stats = trainer.compiled()->stats();
  if (const amp::GradScaler* scaler = trainer.scaler())  // read once, after training
    std::printf("loss scale %g; steps skipped on overflow %lld of %lld\n", scaler->get_scale(),
                static_cast<long long>(options.train.steps - trainer.optimizer().steps()),
                static_cast<long long>(options.train.steps));
  std::printf("held-out loss %.4f (target < %.2f)\n", r.eval_loss, kTargetLoss);
  return r;
}

std::string count_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, std::fabs(v - std::round(v)) < 1e-9 ? "%.0f" : "%.1f", v);
  return buf;
}
std::string bytes_text(std::optional<std::int64_t> bytes) {
  if (!bytes) return "n/a";
  char buf[32];
  double b = static_cast<double>(*bytes);
  if (b >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2f MB", b / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.1f kB", b / 1e3);
  return buf;
}
std::string ms_text(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ms", ms);
  return buf;
}

// One row of the summary: a label and one cell per run.
void row(const char* label, const std::vector<std::string>& cells) {
  std::printf("%-38s", label);
  for (const auto& c : cells) std::printf(" %18s", c.c_str());
  std::printf("\n");
}

void summary(const DemoOptions& options,
             const std::vector<std::pair<std::string, RunResult>>& runs) {
  auto cells = [&](auto&& f) {
    std::vector<std::string> out;
    for (const auto& [name, r] : runs) out.push_back(f(r));
    return out;
  };
  auto dram_total = [](const std::optional<Dram>& d) {
    return d ? std::optional<std::int64_t>(d->total()) : std::nullopt;
  };
  std::printf(
      "\n== summary (%s; vocab %lld, seq %lld, d_model %lld, heads %lld, layers %lld, "
      "batch %lld) ==\n",
      options.device.str().c_str(), static_cast<long long>(options.model.vocab),
      static_cast<long long>(options.model.seq_len), static_cast<long long>(options.model.d_model),
      static_cast<long long>(options.model.heads), static_cast<long long>(options.model.layers),
      static_cast<long long>(options.train.batch));
  std::vector<std::string> names;
  for (const auto& [name, r] : runs) names.push_back(name);
  row("", names);
  row("final training loss", cells([](const RunResult& r) {
        char b[32];
        std::snprintf(b, sizeof b, "%.4f", r.losses.back());
        return std::string(b);
      }));
  row("held-out loss", cells([](const RunResult& r) {
        char b[32];
        std::snprintf(b, sizeof b, "%.4f", r.eval_loss);
        return std::string(b);
      }));
  const bool cuda = options.device.is_cuda();
  for (auto [label, phase] :
       {std::pair{"forward (the loss; compiled when --compile)", &RunResult::forward},
        std::pair{"backward", &RunResult::backward},
        std::pair{"optimizer (clipping, fused AdamW, schedule)", &RunResult::optimizer}}) {
    row(label, cells([](const RunResult&) { return std::string(); }));
    row("  kernel launches per step", cells([&](const RunResult& r) {
          return cuda ? count_text((r.*phase).launches_per_step) : std::string("n/a");
        }));
    row("  library calls per step", cells([&](const RunResult& r) {
          return cuda ? count_text((r.*phase).library_calls_per_step) : std::string("n/a");
        }));
    row("  host syncs per step", cells([&](const RunResult& r) {
          return cuda ? count_text((r.*phase).host_syncs_per_step) : std::string("n/a");
        }));
    row("  DRAM bytes per step (kernels+library)",
        cells([&](const RunResult& r) { return bytes_text(dram_total((r.*phase).dram)); }));
    row("    kernels (profiler-measured)", cells([&](const RunResult& r) {
          const auto& d = (r.*phase).dram;
          return bytes_text(d ? std::optional(d->kernel_bytes) : std::nullopt);
        }));
    row("    library operands", cells([&](const RunResult& r) {
          const auto& d = (r.*phase).dram;
          return bytes_text(d ? std::optional(d->library_bytes) : std::nullopt);
        }));
    row("  host time per warm step",
        cells([&](const RunResult& r) { return ms_text((r.*phase).warm_ms); }));
  }
  row("peak device memory (training)", cells([](const RunResult& r) {
        return bytes_text(r.peak_bytes ? std::optional(static_cast<std::int64_t>(*r.peak_bytes))
                                       : std::nullopt);
      }));
  row("  less the cuBLASLt workspace", cells([](const RunResult& r) {
        return bytes_text(r.peak_bytes ? std::optional(static_cast<std::int64_t>(*r.peak_bytes -
                                                                                 r.workspace_bytes))
                                       : std::nullopt);
      }));
  row("first step", cells([](const RunResult& r) { return ms_text(r.first_step_ms); }));
  row("compile (first step - warm step)",
      cells([](const RunResult& r) { return ms_text(r.first_step_ms - r.warm_step_ms); }));
  row("  NVRTC compiles in the run (time)", cells([&](const RunResult& r) {
        return cuda ? count_text(static_cast<double>(r.nvrtc_compiles)) + " (" +
                          ms_text(r.nvrtc_ms) + ")"
                    : std::string("n/a");
      }));
  row("host time per warm step (whole step)",
      cells([](const RunResult& r) { return ms_text(r.warm_step_ms); }));
  row("held-out forward, no grad: launches", cells([&](const RunResult& r) {
        return cuda ? count_text(static_cast<double>(r.eval_work.launches)) : std::string("n/a");
      }));
  row("  library calls", cells([&](const RunResult& r) {
        return cuda ? count_text(static_cast<double>(r.eval_work.library_calls))
                    : std::string("n/a");
      }));
  row("  DRAM bytes",
      cells([&](const RunResult& r) { return bytes_text(dram_total(r.eval_dram)); }));
  row("compiled calls run by kernels", cells([](const RunResult& r) {
        if (!r.compiled_stats) return std::string("-");
        return std::to_string(r.compiled_stats->kernel_calls) + " of " +
               std::to_string(r.compiled_stats->calls);
      }));

  // What the figures mean, where that is not obvious from the row.
  bool profiled = false, node_by_node = false, cached = cuda, compare = runs.size() == 2;
  for (const auto& [name, r] : runs) {
    profiled = profiled || r.forward.dram.has_value();
    node_by_node = node_by_node ||
                   (r.compiled_stats && r.compiled_stats->kernel_calls < r.compiled_stats->calls);
    cached = cached && r.nvrtc_compiles == 0;
  }
  std::printf("\n");
  if (profiled)
    std::printf(
        "DRAM: the generated kernels of step 2 as the virtual GPU's profiler measured them\n"
        "(distinct 32-byte sectors per launch), plus each library call's operands read or\n"
        "written once (the virtual GPU runs cuBLASLt on the host, unobserved). Host time on\n"
        "the virtual GPU includes interpreting every kernel.\n");
  if (node_by_node && !cuda)
    std::printf(
        "compiled on the CPU: kernels are generated for CUDA only, so every call runs\n"
        "the traced (optimized) graph node by node.\n");
  else if (node_by_node)
    std::printf(
        "compiled: some calls ran node by node through autograd (KILN_LOG=aot says why).\n");
  if (cached)
    std::printf(
        "NVRTC compiles 0: every kernel came from the disk cache (a cold run:\n"
        "KILN_CACHE_DIR=$(mktemp -d)).\n");
  else if (compare && cuda)
    std::printf("The compiled run reuses the kernels the eager run compiled in this process.\n");
}

// --export: one run's model, losses and step times as JSON, for bench/peers/gpt_train.py.
void export_run(const DemoOptions& o, const std::string& mode, const RunResult& r) {
  std::string path = o.export_dir + "/kiln_" + mode + ".json";
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw Error("gpt_train --export: cannot write " + path);
  auto list = [](const std::vector<double>& v) {
    std::string s;
    for (double x : v)
      s += (s.empty() ? "" : ", ") + (std::isfinite(x) ? fmt::format("{}", x) : "null");
    return "[" + s + "]";
  };
  std::fprintf(f,
               "{\"mode\": \"%s\", \"device\": \"%s\", \"backend\": \"%s\", \"autocast\": \"%s\",\n"
               " \"vocab\": %lld, \"seq_len\": %lld, \"d_model\": %lld, \"heads\": %lld, "
               "\"layers\": %lld, \"mlp_ratio\": %lld,\n"
               " \"batch\": %lld, \"steps\": %lld, \"lr\": %g, \"min_lr\": %g, \"warmup_steps\": "
               "%lld, \"weight_decay\": %g, \"clip_norm\": %g,\n"
               " \"warm_step_ms\": %g, \"eval_loss\": %g,\n \"losses\": %s,\n \"step_ms\": %s}\n",
               mode.c_str(), o.device.str().c_str(),
               o.device.is_cuda() ? std::string(cuda::backend().kind()).c_str() : "cpu",
               !o.train.autocast                  ? "none"
               : *o.train.autocast == DType::bf16 ? "bf16"
                                                  : "f16",
               (long long)o.model.vocab, (long long)o.model.seq_len, (long long)o.model.d_model,
               (long long)o.model.heads, (long long)o.model.layers, (long long)o.model.mlp_ratio,
               (long long)o.train.batch, (long long)o.train.steps, o.train.lr, o.train.min_lr,
               (long long)o.train.warmup_steps, o.train.weight_decay, o.train.clip_norm,
               r.warm_step_ms, r.eval_loss, list(r.losses).c_str(), list(r.step_ms).c_str());
  std::fclose(f);
  std::printf("exported %s\n", path.c_str());
}

// Trains as `options` say, prints the figures; the exit status.
int run_demo(const DemoOptions& options) {
  const bool checked = options.train.steps >= gpt::TrainConfig{}.steps;

  std::vector<std::pair<std::string, RunResult>> runs;
  auto wall0 = Clock::now();
  if (options.mode != DemoOptions::Mode::compiled)
    runs.emplace_back("eager", train(options, false));
  if (options.mode != DemoOptions::Mode::eager) runs.emplace_back("compiled", train(options, true));
  summary(options, runs);
  if (!options.export_dir.empty())
    for (const auto& [name, r] : runs) export_run(options, name, r);

  if (runs.size() == 2) {
    double max_rel = 0;
    const auto &a = runs[0].second.losses, &b = runs[1].second.losses;
    for (std::size_t i = 0; i < a.size(); ++i)
      max_rel = std::max(max_rel, std::fabs(a[i] - b[i]) / std::max(std::fabs(a[i]), 1e-12));
    std::printf("max relative difference of losses, eager vs compiled: %.3g\n", max_rel);
  }
  std::printf("wall time %.1f s\n", ms_since(wall0) / 1e3);

  bool reached = true;
  for (const auto& [name, r] : runs) reached = reached && r.eval_loss < kTargetLoss;
  if (!checked) {
    std::printf("target loss %.2f not checked: fewer than the default %lld steps\n", kTargetLoss,
                static_cast<long long>(gpt::TrainConfig{}.steps));
    return 0;
  }
  std::printf("target held-out loss < %.2f: %s\n", kTargetLoss, reached ? "reached" : "MISSED");
  return reached ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  DemoOptions options;
  if (!parse(argc, argv, options)) return 2;
  try {
    if (options.ddp) gpt::join_ranks(options.train);
    int status = run_demo(options);
    if (options.ddp) gpt::leave_ranks();
    return status;
  } catch (const std::exception& e) {  // kiln::Error: no device, an op the model needs failed
    std::fprintf(stderr, "gpt_train: %s\n", e.what());
    return 1;
  }
}
