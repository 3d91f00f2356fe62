// The cost of a compiled training step, on the GPT demo's model (demos/gpt_model.h): the loss
// and its gradients eagerly, compiled, and compiled with every block checkpointed. Per mode: the
// generated-kernel launches and cuBLASLt calls of one warm forward + backward, the DRAM bytes the
// virtual GPU's profiler measures for them (library operands counted once), the bytes the
// forward leaves allocated for the backward, and the first (cold) step's time against a warm one.
// Kernels compile into a fresh cache directory, so the cold figure includes every NVRTC compile
// the mode needs that an earlier mode did not. The optimizer is not part of that step; a second
// table measures the demo's whole warm step (with clipping, AdamW and the schedule).
// KILN_BENCH_REPS: warm steps timed per mode (default 5). KILN_BENCH_TABLE=1: each mode's
// per-kernel profile of the measured step, on stderr.
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "demos/gpt_model.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/lt_matmul.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/host_sync.h"
#include "runtime/cuda/virtual/profiler.h"
#include "runtime/cuda_backend.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

struct Figures {
  std::int64_t launches = 0, library_calls = 0;
  std::int64_t kernel_dram = 0, library_bytes = 0;
  std::int64_t held_for_backward = 0;
  double cold_ms = 0, warm_ms = 0;
};

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

Figures measure(const gpt::GptConfig& config, const gpt::TaskBatch& batch, bool compiled,
                int reps) {
  gpt::Gpt model(config, 1, Device::cuda());
  auto eager = [&](const Tensor& tokens, const Tensor& targets) {
    return model.loss(tokens, targets);
  };
  jit::CompileOptions options;
  options.name = "gpt_loss";
  options.modules = {&model};
  auto f = jit::compile(eager, options);
  auto loss_of = [&] {
    return compiled ? f(batch.tokens, batch.targets) : eager(batch.tokens, batch.targets);
  };
  auto step = [&] {
    model.zero_grad();
    loss_of().backward();
  };
  Figures out;
  auto t0 = Clock::now();
  step();
  out.cold_ms = ms_since(t0);
  t0 = Clock::now();
  for (int i = 0; i < reps; ++i) step();
  out.warm_ms = ms_since(t0) / reps;

  model.zero_grad();
  auto& alloc = cuda_allocator();
  std::size_t before = alloc.stats().allocated;
  auto launches = jit::codegen::launch_stats().launches.load();
  auto calls = jit::codegen::lt_stats().calls.load();
  auto lib_bytes =
      jit::codegen::lt_stats().bytes_read.load() + jit::codegen::lt_stats().bytes_written.load();
  cuda::vgpu::clear_profiles();
  cuda::vgpu::set_profiling(true);
  Tensor loss = loss_of();
  out.held_for_backward = static_cast<std::int64_t>(alloc.stats().allocated - before);
  loss.backward();
  cuda::vgpu::set_profiling(false);
  if (const char* table = std::getenv("KILN_BENCH_TABLE"); table && std::string(table) == "1")
    std::fprintf(stderr, "%s step, per kernel:\n%s\n", compiled ? "compiled" : "eager",
                 cuda::vgpu::profile_table(cuda::vgpu::profiles()).c_str());
  for (const auto& p : cuda::vgpu::profiles())
    out.kernel_dram += static_cast<std::int64_t>(p.dram_bytes());
  cuda::vgpu::clear_profiles();
  out.launches = jit::codegen::launch_stats().launches.load() - launches;
  out.library_calls = jit::codegen::lt_stats().calls.load() - calls;
  out.library_bytes = jit::codegen::lt_stats().bytes_read.load() +
                      jit::codegen::lt_stats().bytes_written.load() - lib_bytes;
  return out;
}

// The whole training step of the demo's Trainer (forward, backward, clip_grad_norm_tensor_, fused
// AdamW, schedule), warm: launches per half, DRAM of all of it (kernels and library operands),
// and what it made the host wait for or allocate.
struct WholeStep {
  std::int64_t forward_backward = 0, optimizer = 0;  // generated-kernel launches
  std::int64_t dram = 0;                             // kernels + library operands
  std::int64_t copies_to_host = 0, syncs = 0, backend_allocs = 0;
};

WholeStep measure_whole_step(const gpt::GptConfig& config, bool compiled) {
  gpt::TrainConfig train;
  gpt::Trainer trainer(config, train, Device::cuda(), compiled);
  for (int i = 0; i < 4; ++i) {  // warm: compiled, and the caching allocator settled
    trainer.forward_backward();
    trainer.optimizer_step();
  }
  auto launches = [] { return jit::codegen::launch_stats().launches.load(); };
  auto lib_bytes = [] {
    return jit::codegen::lt_stats().bytes_read.load() +
           jit::codegen::lt_stats().bytes_written.load();
  };
  auto& sync = cuda::host_sync_stats();
  auto& alloc = cuda_allocator();
  WholeStep out;
  std::int64_t copies = sync.device_to_host_copies.load(), syncs = sync.synchronizations.load();
  std::size_t allocs = alloc.stats().num_backend_allocs;
  std::int64_t lib = lib_bytes();
  cuda::vgpu::clear_profiles();
  cuda::vgpu::set_profiling(true);
  std::int64_t before = launches();
  trainer.forward_backward();
  out.forward_backward = launches() - before;
  before = launches();
  trainer.optimizer_step();
  out.optimizer = launches() - before;
  cuda::vgpu::set_profiling(false);
  for (const auto& p : cuda::vgpu::profiles())
    out.dram += static_cast<std::int64_t>(p.dram_bytes());
  cuda::vgpu::clear_profiles();
  out.dram += lib_bytes() - lib;
  out.copies_to_host = sync.device_to_host_copies.load() - copies;
  out.syncs = sync.synchronizations.load() - syncs;
  out.backend_allocs = static_cast<std::int64_t>(alloc.stats().num_backend_allocs - allocs);
  return out;
}

}  // namespace

int main() {
  const char* reps_env = std::getenv("KILN_BENCH_REPS");
  const int reps = reps_env ? std::max(1, std::atoi(reps_env)) : 5;
  // Cold means cold: a cache directory of this run's own.
  std::filesystem::path cache =
      std::filesystem::temp_directory_path() / ("kiln-bench-training-" + std::to_string(getpid()));
  setenv("KILN_CACHE_DIR", cache.c_str(), 1);

  gpt::GptConfig config;  // the demo's: vocab 16, seq 8, d_model 32, 2 heads, 2 layers
  Generator gen(7);
  gpt::TaskBatch batch = gpt::make_batch(config, 24, config.seq_len, gen, Device::cuda());
  gpt::GptConfig checkpointed = config;
  checkpointed.checkpoint_blocks = true;

  std::printf("GPT training step (forward + backward, no optimizer) on %s, batch 24\n",
              Device::cuda().str().c_str());
  Figures eager = measure(config, batch, false, reps);
  Figures compiled = measure(config, batch, true, reps);
  Figures ckpt = measure(checkpointed, batch, true, reps);
  std::printf("%-40s %14s %14s %14s\n", "", "eager", "compiled", "+checkpoint");
  auto row = [](const char* label, auto get, const Figures& a, const Figures& b, const Figures& c) {
    std::printf("%-40s %14s %14s %14s\n", label, get(a).c_str(), get(b).c_str(), get(c).c_str());
  };
  auto count = [](auto field) {
    return [field](const Figures& f) { return std::to_string(f.*field); };
  };
  auto kb = [](std::int64_t bytes) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f kB", static_cast<double>(bytes) / 1e3);
    return std::string(b);
  };
  auto ms = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f ms", v);
    return std::string(b);
  };
  row("kernel launches", count(&Figures::launches), eager, compiled, ckpt);
  row("cuBLASLt calls", count(&Figures::library_calls), eager, compiled, ckpt);
  row(
      "DRAM: kernels (profiler)", [&](const Figures& f) { return kb(f.kernel_dram); }, eager,
      compiled, ckpt);
  row(
      "DRAM: + library operands",
      [&](const Figures& f) { return kb(f.kernel_dram + f.library_bytes); }, eager, compiled, ckpt);
  row(
      "held for the backward after the forward",
      [&](const Figures& f) { return kb(f.held_for_backward); }, eager, compiled, ckpt);
  row(
      "first step (cold, NVRTC included)", [&](const Figures& f) { return ms(f.cold_ms); }, eager,
      compiled, ckpt);
  row(
      "warm step (virtual GPU interprets)", [&](const Figures& f) { return ms(f.warm_ms); }, eager,
      compiled, ckpt);
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  std::printf(
      "\ncompiled / eager: launches %.2fx, DRAM %.2fx, held for backward %.2fx\n",
      ratio(compiled.launches, eager.launches),
      ratio(compiled.kernel_dram + compiled.library_bytes, eager.kernel_dram + eager.library_bytes),
      ratio(compiled.held_for_backward, eager.held_for_backward));
  std::printf("checkpointed / compiled: held for backward %.2fx\n",
              ratio(ckpt.held_for_backward, compiled.held_for_backward));

  WholeStep whole_eager = measure_whole_step(config, false);
  WholeStep whole_compiled = measure_whole_step(config, true);
  std::printf(
      "\nWhole training step (forward, backward, clip_grad_norm_tensor_, fused AdamW, "
      "schedule), warm\n");
  std::printf("%-40s %14s %14s\n", "", "eager", "compiled");
  auto whole_row = [](const char* label, auto get, const WholeStep& a, const WholeStep& b) {
    std::printf("%-40s %14s %14s\n", label, get(a).c_str(), get(b).c_str());
  };
  auto whole_count = [](auto field) {
    return [field](const WholeStep& f) { return std::to_string(f.*field); };
  };
  whole_row("launches: forward + backward", whole_count(&WholeStep::forward_backward), whole_eager,
            whole_compiled);
  whole_row("launches: clip + AdamW + schedule", whole_count(&WholeStep::optimizer), whole_eager,
            whole_compiled);
  whole_row(
      "DRAM: kernels + library operands", [&](const WholeStep& f) { return kb(f.dram); },
      whole_eager, whole_compiled);
  whole_row("copies to the host", whole_count(&WholeStep::copies_to_host), whole_eager,
            whole_compiled);
  whole_row("synchronizations", whole_count(&WholeStep::syncs), whole_eager, whole_compiled);
  whole_row("backend allocations", whole_count(&WholeStep::backend_allocs), whole_eager,
            whole_compiled);
  std::printf("compiled / eager, whole step: launches %.2fx, DRAM %.2fx\n",
              ratio(whole_compiled.forward_backward + whole_compiled.optimizer,
                    whole_eager.forward_backward + whole_eager.optimizer),
              ratio(whole_compiled.dram, whole_eager.dram));
  std::filesystem::remove_all(cache);
  return 0;
}
