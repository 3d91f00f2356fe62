// Reduction schedules side by side on one kernel: what each costs in warp-level requests,
// sectors per request, shared-memory traffic and modeled H100 time, measured by the virtual
// GPU's profiler. A sum over the batch (a bias gradient) runs the outer schedule against the
// row schedules (whose lanes read a row apart); softmax over short rows runs a warp per row
// against a block per row.
// Sizes: KILN_BENCH_ROWS x KILN_BENCH_HIDDEN (default 256 x 1024), then 4096 x 1024
// (KILN_BENCH_ROOFLINE=0 skips it). Issue slots per DRAM byte weigh each instruction by its H100
// cost (runtime/cuda/virtual/issue_cost.h); the bound is the term the modeled time comes from.
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "graph/fusion.h"
#include "jit/codegen/reduction.h"
#include "jit/codegen/schedule_limits.h"
#include "jit/compile.h"
#include "runtime/cuda/virtual/profiler.h"

using namespace kiln;
namespace codegen = kiln::jit::codegen;
namespace vgpu = kiln::cuda::vgpu;

namespace {

std::int64_t env_or(const char* name, std::int64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoll(v) : fallback;
}

// One reduction kernel rendered from `fn`'s trace, with the graph it reads.
struct Traced {
  graph::Graph graph;
  graph::FusionGroup group;
  codegen::ReductionKernel kernel;
};

Traced trace(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x) {
  auto f = jit::compile([&](const Tensor& a) { return fn(a); });
  f(x);
  Traced t;
  t.graph = f.core().graph(0);
  for (const auto& g : graph::partition(t.graph).groups)
    if (g.kind == graph::FusionKind::reduction || g.kind == graph::FusionKind::normalization)
      t.group = g;
  t.kernel = codegen::render_reduction(t.graph, t.group);
  return t;
}

// Limits that leave a reduction only the forms a row of the table measures.
codegen::ScheduleLimits without(bool outer_rows, bool warp_rows) {
  codegen::ScheduleLimits limits;
  limits.outer_rows = outer_rows;
  limits.warp_rows = warp_rows;
  return limits;
}

vgpu::KernelProfile run(const Traced& t, const Tensor& x,
                        const codegen::ScheduleLimits& limits = {}) {
  codegen::ScopedScheduleLimits scope(limits);
  std::vector<Tensor> values(t.graph.values.size());
  values[t.graph.inputs.at(0).value] = x;
  Shape domain;
  for (const auto& s : t.group.domain) domain.push_back(s.constant_value());
  vgpu::set_profiling(true);
  vgpu::clear_profiles();
  codegen::run_reduction(t.graph, t.kernel, domain, values);
  vgpu::set_profiling(false);
  return vgpu::profiles().at(0);
}

void row(const char* workload, const char* schedule, const vgpu::KernelProfile& p) {
  double requests = static_cast<double>(p.load_requests + p.store_requests);
  std::printf("%-30s %-14s %8u x %-4u %11.0f %9.2f %11llu %9.2f %8.2f %9.1f %-7s\n", workload,
              schedule, p.grid.x * p.grid.y, p.block.x * p.block.y, requests,
              static_cast<double>(p.load_sectors + p.store_sectors) / requests,
              static_cast<unsigned long long>(p.shared_requests), p.dram_bytes() / 1e6,
              p.issue_slots() / static_cast<double>(p.dram_bytes()), p.modeled_h100_us(),
              vgpu::bound_name(p.bound()));
}

void schedules(std::int64_t rows, std::int64_t hidden) {
  std::printf(
      "\nreduction schedules at %lld x %lld (f32), measured by the virtual GPU's profiler;\n"
      "H100 us is its model (3 us launch + traffic at 3.35 TB/s or weighted issue)\n\n",
      static_cast<long long>(rows), static_cast<long long>(hidden));
  std::printf("%-30s %-14s %15s %11s %9s %11s %9s %8s %9s %-7s\n", "workload", "schedule",
              "blocks x thr", "requests", "sect/req", "shared req", "DRAM MB", "slots/B", "H100 us",
              "bound");

  // A bias gradient: sum over the batch, the innermost dim kept.
  Tensor x = randn({rows, hidden}).to(Device::cuda());
  Traced over_batch = trace([](const Tensor& a) { return sum(a, {0}); }, x);
  row("sum over the batch", "outer", run(over_batch, x));
  if (rows <= codegen::kWarpRowMaxCols)
    row("sum over the batch", "warp per row", run(over_batch, x, without(false, true)));
  row("sum over the batch", "block per row", run(over_batch, x, without(false, false)));

  // Attention-style softmax over short rows.
  Tensor s = randn({rows * 16, 64}).to(Device::cuda());
  Traced short_rows = trace([](const Tensor& a) { return softmax(a, 1); }, s);
  row("softmax, 64 columns", "warp per row", run(short_rows, s));
  row("softmax, 64 columns", "block per row", run(short_rows, s, without(true, false)));
}

}  // namespace

int main() {
  std::int64_t rows = env_or("KILN_BENCH_ROWS", 256), hidden = env_or("KILN_BENCH_HIDDEN", 1024);
  KILN_CHECK(cuda::backend().kind() == "virtual",
             "bench_schedules reads the virtual GPU's profiler: run with KILN_CUDA=virtual");
  schedules(rows, hidden);
  if (env_or("KILN_BENCH_ROOFLINE", 1) != 0 && rows != 4096) schedules(4096, 1024);
  return 0;
}
