// Generated kernels on the blocks a transformer is made of: launches and measured global bytes
// eagerly (one kernel per op), compiled (kiln's fusion), and the ideal (each input read once,
// each output written once); then compile and call costs. Runs on the virtual GPU, whose
// profiler measures the traffic. Last, the cold compile of a function of 1, 4 and 12 identical
// blocks, which a kernel's identity by its code keeps flat. Sizes: KILN_BENCH_ROWS x
// KILN_BENCH_HIDDEN (default 256 x 1024). The roofline table runs each block's compiled kernels
// and row, column and full sums at 256 x 1024 and 4096 x 1024 (KILN_BENCH_ROOFLINE=0 skips the
// large size, which the virtual GPU interprets in about a minute): instructions weighted by their
// H100 issue cost against the DRAM-bound time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "cache/disk_cache.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/pointwise.h"
#include "jit/codegen/schedule_limits.h"
#include "jit/compile.h"
#include "runtime/cuda/virtual/profiler.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

std::int64_t env_or(const char* name, std::int64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoll(v) : fallback;
}

std::int64_t bytes(const std::vector<Tensor>& ts) {
  std::int64_t n = 0;
  for (const auto& t : ts) n += t.numel() * static_cast<std::int64_t>(itemsize(t.dtype()));
  return n;
}

struct Counts {
  std::int64_t launches, planned_bytes;
  std::int64_t measured_bytes = 0;  // DRAM sectors the virtual GPU's profiler counted
  double modeled_us = 0;            // the profiler's H100 model, summed over launches
};

Counts measure(const std::function<std::vector<Tensor>()>& run) {
  auto& s = jit::codegen::launch_stats();
  std::int64_t l = s.launches, r = s.bytes_read, w = s.bytes_written;
  namespace vgpu = cuda::vgpu;
  vgpu::set_profiling(true);
  vgpu::clear_profiles();
  run();
  vgpu::set_profiling(false);
  Counts c{s.launches - l, (s.bytes_read - r) + (s.bytes_written - w)};
  for (const auto& p : vgpu::profiles()) {
    c.measured_bytes += static_cast<std::int64_t>(p.dram_bytes());
    c.modeled_us += p.modeled_h100_us();
  }
  return c;
}

using Block = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct Case {
  const char* name;
  Block block;
  std::vector<Tensor> inputs;
};

// The transformer blocks at rows x hidden; with `sums`, row, column and full sums too.
std::vector<Case> cases(std::int64_t rows, std::int64_t hidden, DType dtype, bool sums) {
  Device cuda = Device::cuda();
  Tensor x = randn({rows, hidden}).to(dtype).to(cuda);
  Tensor r = randn({rows, hidden}).to(dtype).to(cuda);
  Tensor w = randn({hidden}).to(dtype).to(cuda), b = randn({hidden}).to(dtype).to(cuda);
  Tensor target = randint(0, hidden, {rows}, DType::i64).to(cuda);
  std::vector<Case> out = {
      {"bias + GELU", [](auto& in) { return std::vector<Tensor>{gelu(in[0] + in[1])}; }, {x, b}},
      {"residual + LayerNorm",
       [](auto& in) {
         Tensor h = in[0] + in[1];
         return std::vector<Tensor>{h, layer_norm(h, {in[2].size(0)}, in[2], Tensor(), 1e-5)};
       },
       {x, r, w}},
      {"softmax", [](auto& in) { return std::vector<Tensor>{softmax(in[0], -1) * in[1]}; }, {x, b}},
      {"log_softmax",
       [](auto& in) { return std::vector<Tensor>{log_softmax(in[0], -1) + in[1]}; },
       {x, b}},
      {"RMSNorm",
       [](auto& in) { return std::vector<Tensor>{rms_norm(in[0], {in[1].size(0)}, in[1], 1e-6)}; },
       {x, w}},
      {"cross-entropy",
       [](auto& in) { return std::vector<Tensor>{cross_entropy(in[0], in[1])}; },
       {x, target}},
      {"SiLU gate", [](auto& in) { return std::vector<Tensor>{in[0] * silu(in[1])}; }, {x, r}},
  };
  if (sums) {
    out.push_back({"row sum", [](auto& in) { return std::vector<Tensor>{sum(in[0], {1})}; }, {x}});
    out.push_back(
        {"column sum", [](auto& in) { return std::vector<Tensor>{sum(in[0], {0})}; }, {x}});
    out.push_back({"full sum", [](auto& in) { return std::vector<Tensor>{sum(in[0])}; }, {x}});
  }
  return out;
}

void row(const char* name, DType dtype, const Block& block, const std::vector<Tensor>& inputs) {
  // Eager: every op its own launch.
  Counts eager = measure([&] { return block(inputs); });
  std::vector<Tensor> outs;
  Counts kiln{0, 0};
  if (inputs.size() == 2) {
    auto f = jit::compile([&](const Tensor& a, const Tensor& b) { return block({a, b}); });
    f(inputs[0], inputs[1]);  // compile
    kiln = measure([&] { return outs = f(inputs[0], inputs[1]); });
  } else {
    auto f = jit::compile([&](const Tensor& a, const Tensor& b, const Tensor& c) {
      return block({a, b, c});
    });
    f(inputs[0], inputs[1], inputs[2]);
    kiln = measure([&] { return outs = f(inputs[0], inputs[1], inputs[2]); });
  }
  auto ideal = static_cast<double>(bytes(inputs) + bytes(outs));
  std::printf("%-22s %-5s %6lld %5lld %9.2f %9.2f %9.2f %7.2f %7.2f %9.1f %9.1f\n", name,
              std::string(dtype_name(dtype)).c_str(), static_cast<long long>(eager.launches),
              static_cast<long long>(kiln.launches), eager.measured_bytes / 1e6,
              kiln.measured_bytes / 1e6, ideal / 1e6, kiln.measured_bytes / ideal,
              kiln.planned_bytes / ideal, eager.modeled_us, kiln.modeled_us);
}

// One generated pointwise kernel, scalar path against vector path: warp-level global requests,
// the 32-byte sectors each touches, thread-instructions per element, and DRAM bytes against
// the ideal. Only the kernels kiln generated for the block are counted.
void vector_rows(const char* name, DType dtype, const Block& block,
                 const std::vector<Tensor>& inputs) {
  auto f = jit::compile([&](const Tensor& a, const Tensor& b) { return block({a, b}); });
  std::vector<Tensor> outs = f(inputs[0], inputs[1]);  // compile
  auto ideal = static_cast<double>(bytes(inputs) + bytes(outs));
  auto elements = static_cast<double>(outs[0].numel());
  for (bool vectors : {false, true}) {
    namespace vgpu = cuda::vgpu;
    jit::codegen::ScheduleLimits limits;
    limits.pointwise_vectors = vectors;
    {
      jit::codegen::ScopedScheduleLimits scope(limits);
      vgpu::set_profiling(true);
      vgpu::clear_profiles();
      f(inputs[0], inputs[1]);
      vgpu::set_profiling(false);
    }
    vgpu::KernelProfile p;
    p.launches = 0;
    for (const auto& k : vgpu::profiles())
      if (k.kernel.rfind("k_", 0) == 0) p.add(k);
    auto requests = static_cast<double>(p.load_requests + p.store_requests);
    std::printf("%-14s %-5s %-6s %9llu %9llu %8.2f %10.2f %9.1f %9.2f %9.2f\n", name,
                std::string(dtype_name(dtype)).c_str(), vectors ? "vector" : "scalar",
                static_cast<unsigned long long>(p.load_requests),
                static_cast<unsigned long long>(p.store_requests),
                static_cast<double>(p.load_sectors + p.store_sectors) / requests, ideal / requests,
                static_cast<double>(p.thread_instructions) / elements,
                static_cast<double>(p.dram_bytes()) / 1e6, ideal / 1e6);
  }
}

// The block compiled for its 2 or 3 inputs: a call of the compiled function.
std::function<std::vector<Tensor>()> compiled(const Block& block, const std::vector<Tensor>& in) {
  auto share = [](auto f) { return std::make_shared<decltype(f)>(std::move(f)); };
  if (in.size() == 1) {
    auto f = share(jit::compile([block](const Tensor& a) { return block({a}); }));
    return [f, in] { return (*f)(in[0]); };
  }
  if (in.size() == 2) {
    auto f = share(jit::compile([block](const Tensor& a, const Tensor& b) {
      return block({a, b});
    }));
    return [f, in] { return (*f)(in[0], in[1]); };
  }
  auto f = share(jit::compile([block](const Tensor& a, const Tensor& b, const Tensor& c) {
    return block({a, b, c});
  }));
  return [f, in] { return (*f)(in[0], in[1], in[2]); };
}

// The generated kernels of one compiled call against the H100 roofline: thread-instructions and
// issue slots (instructions weighted by their cost, issue_cost.h) per element of the block's
// domain, slots per DRAM byte, the DRAM-bound and issue-bound times, the modeled time (launch +
// the larger) and which bound it comes from, DRAM bytes against the ideal.
void roofline_row(const char* name, DType dtype, const Block& block,
                  const std::vector<Tensor>& inputs) {
  auto call = compiled(block, inputs);
  std::vector<Tensor> outs = call();  // compile
  namespace vgpu = cuda::vgpu;
  vgpu::set_profiling(true);
  vgpu::clear_profiles();
  call();
  vgpu::set_profiling(false);
  vgpu::KernelProfile p;
  p.launches = 0;
  double modeled = 0, memory = 0, issue = 0;
  for (const auto& k : vgpu::profiles()) {
    if (k.kernel.rfind("k_", 0) != 0) continue;
    p.add(k);
    modeled += k.modeled_h100_us();
    memory += k.memory_us();
    issue += k.issue_us();
  }
  auto elements = static_cast<double>(inputs[0].numel());
  auto ideal = static_cast<double>(bytes(inputs) + bytes(outs));
  std::printf(
      "%-22s %-5s %5lld x %-5lld %8.1f %8.1f %7.2f %8.2f %8.2f %8.2f %6.2f %-7s %6.2f\n", name,
      std::string(dtype_name(dtype)).c_str(), static_cast<long long>(inputs[0].size(0)),
      static_cast<long long>(inputs[0].numel() / std::max<std::int64_t>(1, inputs[0].size(0))),
      static_cast<double>(p.thread_instructions) / elements, p.issue_slots() / elements,
      p.issue_slots() / static_cast<double>(p.dram_bytes()), memory, issue, modeled,
      memory > 0 ? issue / memory : 0.0, vgpu::bound_name(p.bound()),
      static_cast<double>(p.dram_bytes()) / ideal);
}

// The cold first call of a function made of `n` identical blocks (LayerNorm, a GELU residual
// and softmax, then a matmul, as a transformer's blocks are separated by their projections), with
// the disk cache off: a kernel is its code, so the NVRTC compiles and their time stay those of
// one block however many blocks there are. `scale` makes each row's blocks unlike any compiled
// before.
void identical_blocks(int n, double scale, std::int64_t rows, std::int64_t hidden) {
  auto f = jit::compile([=](const Tensor& x, const Tensor& w) {
    Tensor h = x;
    for (int i = 0; i < n; ++i) {
      Tensor a = layer_norm(h * scale, {hidden});
      h = matmul(softmax(gelu(a) + a, -1), w) + h;
    }
    return h;
  });
  Tensor x = randn({rows, hidden}).to(Device::cuda());
  Tensor w = randn({hidden, hidden}).to(Device::cuda());
  auto& s = jit::codegen::launch_stats();
  std::int64_t compiles = s.compiles, compile_us = s.compile_us;
  auto t0 = Clock::now();
  f(x, w);
  double first_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::printf("%8d %10d %10lld %12.1f %14.1f\n", n, f.core().plan(0)->kernel_count(),
              static_cast<long long>(s.compiles - compiles), (s.compile_us - compile_us) / 1000.0,
              first_ms);
}

// KILN_BENCH_BLOCKS=name,...: only the roofline table, for the blocks whose names contain one
// of the comma-separated words (the interpreter takes minutes over all of them).
bool selected(const char* block) {
  const char* only = std::getenv("KILN_BENCH_BLOCKS");
  if (!only) return true;
  std::string list = only, name = block;
  for (std::size_t at = 0; at <= list.size();) {
    std::size_t end = std::min(list.find(',', at), list.size());
    if (end > at && name.find(list.substr(at, end - at)) != std::string::npos) return true;
    at = end + 1;
  }
  return false;
}

void roofline_table() {
  std::printf(
      "\nThe H100 roofline of each block's generated kernels (one compiled call): thread-\n"
      "instructions and issue slots (instructions weighted by their H100 cost) per element,\n"
      "slots per DRAM byte (~10 is the break-even), DRAM-bound and issue-bound us, modeled us\n"
      "(3 us per launch + the larger), issue/DRAM time, the bound, DRAM bytes / ideal\n\n");
  std::printf("%-22s %-5s %13s %8s %8s %7s %8s %8s %8s %6s %-7s %6s\n", "block", "dtype", "size",
              "inst/el", "slots/el", "slots/B", "DRAM us", "issue us", "model us", "i/D", "bound",
              "D/ideal");
  std::vector<std::int64_t> roofline_rows = {256};
  if (env_or("KILN_BENCH_ROOFLINE", 1) != 0) roofline_rows.push_back(4096);
  for (std::int64_t n : roofline_rows)
    for (DType dtype : {DType::f32, DType::bf16})
      for (const auto& c : cases(n, 1024, dtype, true))
        if (selected(c.name)) roofline_row(c.name, dtype, c.block, c.inputs);
}

}  // namespace

int main() {
  std::int64_t rows = env_or("KILN_BENCH_ROWS", 256), hidden = env_or("KILN_BENCH_HIDDEN", 1024);
  Device cuda = Device::cuda();
  KILN_CHECK(cuda::backend().kind() == "virtual",
             "bench_codegen measures traffic with the virtual GPU's profiler: run with "
             "KILN_CUDA=virtual");
  if (std::getenv("KILN_BENCH_BLOCKS")) {
    roofline_table();
    return 0;
  }
  std::printf(
      "blocks at %lld x %lld. Kernels per block, eager (one per op) and kiln; MB are global\n"
      "traffic the virtual GPU's profiler measured (32-byte sectors moved); ideal reads each\n"
      "input once and writes each output once; 'planned' is kiln's own estimate from tensor\n"
      "sizes; H100 us is the profiler's model (3 us launch + the larger of traffic at 3.35 TB/s\n"
      "and weighted instruction issue), summed\n\n",
      static_cast<long long>(rows), static_cast<long long>(hidden));
  std::printf("%-22s %-5s %6s %5s %9s %9s %9s %7s %7s %9s %9s\n", "block", "dtype", "eager", "kiln",
              "eager MB", "kiln MB", "ideal MB", "k/ideal", "planned", "eager us", "kiln us");
  for (DType dtype : {DType::f32, DType::bf16})
    for (const auto& c : cases(rows, hidden, dtype, false)) row(c.name, dtype, c.block, c.inputs);

  std::printf(
      "\nOne pointwise kernel, scalar path against vector path (16-byte accesses): warp-level\n"
      "global requests, 32-byte sectors per request, ideal bytes per request, thread-\n"
      "instructions per element, DRAM MB the profiler measured and the ideal\n\n");
  std::printf("%-14s %-5s %-6s %9s %9s %8s %10s %9s %9s %9s\n", "block", "dtype", "path",
              "load req", "store req", "sect/req", "bytes/req", "instr/el", "DRAM MB", "ideal MB");
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor x = randn({rows, hidden}).to(dtype).to(cuda);
    Tensor r = randn({rows, hidden}).to(dtype).to(cuda);
    Tensor b = randn({hidden}).to(dtype).to(cuda);
    vector_rows("bias + GELU", dtype,
                [](auto& in) { return std::vector<Tensor>{gelu(in[0] + in[1])}; }, {x, b});
    vector_rows("SiLU gate", dtype,
                [](auto& in) { return std::vector<Tensor>{in[0] * silu(in[1])}; }, {x, r});
  }

  roofline_table();

  // Costs: a cold compile per kernel, a hit in the in-process cache, and a warm call.
  auto& s = jit::codegen::launch_stats();
  std::printf("\nNVRTC: %lld kernels compiled, %.1f ms mean per kernel\n",
              static_cast<long long>(s.compiles.load()),
              s.compiles ? s.compile_us / 1000.0 / static_cast<double>(s.compiles) : 0.0);
  // A warm call's host time, split: the guard check (what lookup() runs), the backend's launch
  // calls (on the virtual GPU these run the kernel too), and the plan (the rest: argument
  // packing, allocation, releases).
  Tensor small = randn({8, 64}).to(cuda), bias = randn({64}).to(cuda);
  auto f = jit::compile([](const Tensor& a, const Tensor& c) { return gelu(a + c); });
  f(small, bias);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto us_since = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  };
  std::vector<double> total, guard, launch;
  s.timing = true;
  for (int i = 0; i < 200; ++i) {
    std::int64_t ns = s.launch_ns;
    auto t0 = Clock::now();
    f(small, bias);
    total.push_back(us_since(t0));
    launch.push_back(static_cast<double>(s.launch_ns - ns) / 1000.0);
    t0 = Clock::now();
    if (f.lookup(small, bias) != 0) std::abort();
    guard.push_back(us_since(t0));
  }
  s.timing = false;
  double t = median(total), g = median(guard), l = median(launch);
  std::printf(
      "warm compiled call (8 x 64, one kernel), median of 200: %.1f us = guard check %.2f us + "
      "plan %.1f us + backend launch %.1f us (the virtual GPU runs the kernel inside it)\n",
      t, g, std::max(0.0, t - g - l), l);

  std::printf("\ncold first call of a function of N identical blocks (disk cache off), 8 x 256:\n");
  std::printf("%8s %10s %10s %12s %14s\n", "blocks", "kernels", "compiles", "NVRTC ms",
              "first call ms");
  setenv("KILN_CACHE", "0", 1);
  cache::reset_process_disk_cache();
  double scale = 0.8671875;
  for (int n : {1, 4, 12}) identical_blocks(n, scale += 0.0078125, 8, 256);
  return 0;
}
