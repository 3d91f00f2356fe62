// Host cost of a compiled function's warm call. First the cache hit alone: building the call's
// arguments, checking an entry's guards and finding the entry, with no execution (ns per call and
// per guard for 1, 8 and 64 tensor inputs). Then whole warm calls on the CUDA backend: guard
// check + plan + launch setup, for graphs of 1 and 20 kernels, and with 1, 2 and 4 threads
// calling one compiled function. On the virtual GPU the kernels' own run is excluded: launches
// are checked and counted but not interpreted (vgpu::set_kernel_execution), as a real GPU's
// launch returns once the kernel is queued. KILN_BENCH_REPS: calls per figure (default 2000).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "autograd/ops.h"
#include "jit/codegen/launch_stats.h"
#include "jit/compile.h"
#include "runtime/cuda/backend.h"
#include "runtime/cuda/virtual/virtual_backend.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <std::size_t N>
void measure_lookup() {
  std::array<Tensor, N> inputs;
  for (auto& t : inputs) t = ones({8, 16});
  auto f = jit::compile([](const auto&... xs) { return (xs + ...); });
  auto call = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return f(inputs[I]...);
  };
  auto lookup = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return f.lookup(inputs[I]...);
  };
  call(std::make_index_sequence<N>{});
  if (lookup(std::make_index_sequence<N>{}) != 0) std::abort();

  constexpr int kIters = 20000;
  std::vector<double> runs(9);
  for (auto& run : runs) {
    auto start = Clock::now();
    int found = 0;
    for (int i = 0; i < kIters; ++i) found += lookup(std::make_index_sequence<N>{}) == 0;
    auto stop = Clock::now();
    if (found != kIters) std::abort();
    run = std::chrono::duration<double, std::nano>(stop - start).count() / kIters;
  }
  double ns = median(runs);
  std::size_t guards = f.core().guards(0).count();
  std::printf("%3zu tensor inputs: %8.1f ns per cache hit, %5zu guards, %5.2f ns per guard\n", N,
              ns, guards, ns / static_cast<double>(guards));
}

// `kernels` normalizations in a chain, over columns and rows in turn: each reads the previous
// one's output along other rows, so each is its own kernel.
Tensor chain(const Tensor& x, int kernels) {
  Tensor h = x;
  for (int k = 0; k < kernels; ++k) h = h - h.sum({k % 2}, true) * 0.125;
  return h;
}

struct WarmCall {
  double total_us, launch_us;  // launch_us: inside the backend's launch calls
};

// One thread's warm calls of `f`: the median over `calls`.
template <typename F>
WarmCall warm_calls(F& f, const Tensor& x, int calls) {
  std::vector<double> total, launch;
  for (int i = 0; i < calls; ++i) {
    std::int64_t inside = jit::codegen::thread_launch_ns();
    auto t0 = Clock::now();
    Tensor y = f(x);
    total.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    launch.push_back(static_cast<double>(jit::codegen::thread_launch_ns() - inside) / 1000.0);
  }
  return {median(total), median(launch)};
}

void measure_warm_calls() {
  const char* reps = std::getenv("KILN_BENCH_REPS");
  const int calls = reps ? std::max(1, std::atoi(reps)) : 2000;
  auto& stats = jit::codegen::launch_stats();
  Tensor x = randn({4, 32}).to(Device::cuda());
  bool is_virtual = cuda::backend().properties(0).is_virtual;
  std::printf(
      "\nwarm compiled call on the %s CUDA backend (%s), [4, 32] f32, median of %d calls:\n"
      "guard check, then the whole call (guard check + plan + launch setup), of which the "
      "backend's launch calls\n",
      std::string(cuda::backend().kind()).c_str(),
      is_virtual ? "kernels not run" : "launches enqueued", calls);
  std::printf("%8s %8s %10s %12s %14s %16s %14s\n", "graphs", "kernels", "guard us", "call us",
              "of it launch", "us per +kernel", "launches/call");
  stats.timing = true;
  bool executed = is_virtual ? cuda::vgpu::set_kernel_execution(false) : true;
  double one = 0;
  // With CUDA graphs (jit/cuda_graphs.h) a warm call is one graph launch whatever its kernels.
  for (bool graphs : {false, true})
    for (int kernels : {1, 20}) {
      jit::CompileOptions options;
      options.cuda_graphs = graphs;
      auto f = jit::compile([kernels](const Tensor& t) { return chain(t, kernels); }, options);
      f(x);
      int launched = f.core().plan(0)->kernel_count();
      if (launched != kernels)
        std::fprintf(stderr, "bench_guards: %d kernels, not %d\n", launched, kernels);
      warm_calls(f, x, 20);  // settle the allocator (and capture the graph)
      const std::int64_t launches = stats.launches + stats.graph_launches;
      WarmCall w = warm_calls(f, x, calls);
      const double per_call =
          static_cast<double>(stats.launches + stats.graph_launches - launches) / calls;
      std::vector<double> guard;
      for (int i = 0; i < calls; ++i) {
        auto t0 = Clock::now();
        if (f.lookup(x) != 0) std::abort();
        guard.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
      if (kernels == 1) one = w.total_us;
      std::printf(
          "%8s %8d %10.2f %12.2f %14.2f %16s %14.1f\n", graphs ? "on" : "off", launched,
          median(guard), w.total_us, w.launch_us,
          kernels == 1 ? "-" : fmt::format("{:.3f}", (w.total_us - one) / (kernels - 1)).c_str(),
          per_call);
    }

  // Threads calling one compiled function: with nothing on the host serializing them, calls per
  // second grow with the threads up to the machine's cores.
  auto f = jit::compile([](const Tensor& t) { return chain(t, 1); });
  f(x);
  const int per_thread = std::max(1, calls / 4);
  std::printf("\nthreads calling one compiled function (1 kernel), %d calls each, %u cores:\n",
              per_thread, std::thread::hardware_concurrency());
  std::printf("%8s %16s %18s\n", "threads", "us per call", "calls/s (total)");
  for (int threads : {1, 2, 4}) {
    std::vector<WarmCall> results(threads);
    auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] { results[t] = warm_calls(f, x, per_thread); });
    for (auto& th : pool) th.join();
    double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    double us = 0;
    for (const auto& r : results) us += r.total_us / threads;
    std::printf("%8d %16.2f %18.0f\n", threads, us, threads * per_thread / seconds);
  }
  stats.timing = false;
  if (is_virtual) cuda::vgpu::set_kernel_execution(executed);
}

}  // namespace

int main() {
  std::printf("compiled-function cache hit (guard check + entry lookup, no execution)\n");
  measure_lookup<1>();
  measure_lookup<8>();
  measure_lookup<64>();
  measure_warm_calls();
  return 0;
}
