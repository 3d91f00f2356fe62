// The transformer blocks of bench_codegen as compiled functions, timed: per block the achieved
// bandwidth (each input read once and each output written once, over the block's time) against
// the device's peak, per kernel its time per call. On a GPU (the driver backend) times are
// measured with CUDA events, the block's around the whole call and each kernel's around its
// launch; on the virtual GPU they are its profiler's H100 model. A virtual run's
// `--write-modeled FILE` keeps each kernel's modeled time; a GPU run's `--modeled FILE` prints it
// next to the measured one (scripts/gpu-check runs both). Sizes: KILN_BENCH_ROWS x
// KILN_BENCH_HIDDEN (default 256 x 1024); KILN_BENCH_REPS timed calls (default 20, median).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "autograd/ops.h"
#include "jit/compile.h"
#include "runtime/cuda/backend.h"
#include "runtime/cuda/driver/launch_timing.h"
#include "runtime/cuda/driver/memory_bandwidth.h"
#include "runtime/cuda/virtual/profiler.h"

using namespace kiln;

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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// (block, dtype, kernel) -> modeled us per call, as a virtual run wrote it.
using ModeledTimes = std::map<std::tuple<std::string, std::string, std::string>, double>;

ModeledTimes read_modeled(const std::string& path) {
  ModeledTimes m;
  std::ifstream in(path);
  KILN_CHECK(in, "bench_bandwidth: cannot read the modeled times '{}'", path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string block, dtype, kernel, us;
    if (std::getline(fields, block, '\t') && std::getline(fields, dtype, '\t') &&
        std::getline(fields, kernel, '\t') && std::getline(fields, us, '\t'))
      m[{block, dtype, kernel}] = std::atof(us.c_str());
  }
  return m;
}

struct KernelRow {
  std::string kernel;
  double launches_per_call = 0, us_per_call = 0;
};

class Bench {
 public:
  Bench(bool on_gpu, double peak_bytes_per_s, int reps, const ModeledTimes* modeled,
        std::ofstream* write_modeled)
      : on_gpu_(on_gpu),
        peak_(peak_bytes_per_s),
        reps_(reps),
        modeled_(modeled),
        write_modeled_(write_modeled) {}

  using Block = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

  void run(const char* name, DType dtype, const Block& block, const std::vector<Tensor>& inputs) {
    std::function<std::vector<Tensor>()> call;
    if (inputs.size() == 2) {
      auto f = jit::compile([block](const Tensor& a, const Tensor& b) { return block({a, b}); });
      call = [f, inputs]() mutable { return f(inputs[0], inputs[1]); };
    } else {
      auto f = jit::compile([block](const Tensor& a, const Tensor& b, const Tensor& c) {
        return block({a, b, c});
      });
      call = [f, inputs]() mutable { return f(inputs[0], inputs[1], inputs[2]); };
    }
    std::vector<Tensor> outs = call();  // traces and compiles
    double ideal = static_cast<double>(bytes(inputs) + bytes(outs));
    std::string dtype_text(dtype_name(dtype));
    auto [block_us, kernels] = on_gpu_ ? measure(call) : model(call);
    double launches = 0;
    for (const auto& k : kernels) launches += k.launches_per_call;
    double achieved = block_us > 0 ? ideal / (block_us * 1e-6) : 0;
    std::string of_peak =
        peak_ > 0 && achieved > 0 ? fmt::format("{:.1f}%", 100 * achieved / peak_) : "-";
    std::printf("%-22s %-5s %7.0f %9.2f %9.1f %9.1f %8s\n", name, dtype_text.c_str(), launches,
                ideal / 1e6, block_us, achieved / 1e9, of_peak.c_str());
    for (const auto& k : kernels) {
      std::string modeled = "-";
      if (!on_gpu_) modeled = fmt::format("{:.1f}", k.us_per_call);
      if (modeled_) {
        auto it = modeled_->find({name, dtype_text, k.kernel});
        if (it != modeled_->end()) modeled = fmt::format("{:.1f}", it->second);
      }
      kernel_lines_.push_back(fmt::format(
          "{:<48} {:<22} {:<5} {:>8.0f} {:>11} {:>10}", k.kernel, name, dtype_text,
          k.launches_per_call, on_gpu_ ? fmt::format("{:.1f}", k.us_per_call) : "-", modeled));
      if (write_modeled_)
        *write_modeled_ << name << '\t' << dtype_text << '\t' << k.kernel << '\t' << k.us_per_call
                        << '\n';
    }
  }

  void print_kernels() const {
    std::printf("\n%-48s %-22s %-5s %8s %11s %10s\n", "kernel", "block", "dtype", "launches",
                "measured us", "modeled us");
    for (const auto& line : kernel_lines_) std::printf("%s\n", line.c_str());
  }

 private:
  // The median call bracketed by events on the default stream (where kiln launches), then each
  // kernel's launches bracketed by their own events over as many calls again.
  std::pair<double, std::vector<KernelRow>> measure(
      const std::function<std::vector<Tensor>()>& call) {
    cuda::Backend& be = cuda::backend();
    for (int i = 0; i < 3; ++i) call();  // warm: the allocator holds every block it needs
    cuda::Event start = be.create_event(), end = be.create_event();
    std::vector<double> times;
    for (int i = 0; i < reps_; ++i) {
      be.record_event(start, nullptr);
      call();
      be.record_event(end, nullptr);
      be.synchronize_event(end);
      times.push_back(be.elapsed_ms(start, end) * 1000.0);
    }
    be.destroy_event(start);
    be.destroy_event(end);
    cuda::driver::set_launch_timing(true);
    for (int i = 0; i < reps_; ++i) call();
    cuda::driver::set_launch_timing(false);
    std::vector<KernelRow> kernels;
    for (const auto& k : cuda::driver::take_launch_times())
      kernels.push_back(
          {k.kernel, static_cast<double>(k.launches) / reps_, k.total_ms * 1000.0 / reps_});
    return {median(times), kernels};
  }

  // One call profiled on the virtual GPU: the modeled time of each kernel, summed for the block.
  static std::pair<double, std::vector<KernelRow>> model(
      const std::function<std::vector<Tensor>()>& call) {
    namespace vgpu = cuda::vgpu;
    vgpu::set_profiling(true);
    vgpu::clear_profiles();
    call();
    vgpu::set_profiling(false);
    double total = 0;
    std::vector<KernelRow> kernels;
    for (const auto& p : vgpu::profiles()) {
      kernels.push_back({p.kernel, static_cast<double>(p.launches), p.modeled_h100_us()});
      total += p.modeled_h100_us();
    }
    return {total, kernels};
  }

  bool on_gpu_;
  double peak_;
  int reps_;
  const ModeledTimes* modeled_;
  std::ofstream* write_modeled_;
  std::vector<std::string> kernel_lines_;
};

}  // namespace

int main(int argc, char** argv) {
  std::string modeled_path, write_path;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--modeled" || a == "--write-modeled") && i + 1 < argc) {
      (a == "--modeled" ? modeled_path : write_path) = argv[++i];
    } else {
      std::fprintf(stderr, "usage: bench_bandwidth [--modeled FILE | --write-modeled FILE]\n");
      return 2;
    }
  }
  try {
    std::int64_t rows = env_or("KILN_BENCH_ROWS", 256), hidden = env_or("KILN_BENCH_HIDDEN", 1024);
    int reps = static_cast<int>(std::max<std::int64_t>(1, env_or("KILN_BENCH_REPS", 20)));
    Device cuda = Device::cuda();
    bool on_gpu = cuda::backend().kind() == "driver";
    KILN_CHECK(on_gpu || modeled_path.empty(),
               "--modeled: measured times need a GPU (KILN_CUDA=driver)");
    KILN_CHECK(!on_gpu || write_path.empty(),
               "--write-modeled: modeled times come from the virtual GPU (KILN_CUDA=virtual)");
    double peak = cuda::vgpu::kModeledDramBytesPerSecond;
    if (on_gpu) {
      std::string name = cuda::backend().properties().name;
      try {
        auto b = cuda::driver::peak_memory_bandwidth();
        peak = b.bytes_per_second();
        std::printf(
            "device: %s; peak DRAM bandwidth %.0f GB/s (memory clock %d MHz x %d-bit bus x 2 / "
            "8)\n",
            name.c_str(), peak / 1e9, b.memory_clock_khz / 1000, b.bus_width_bits);
      } catch (const Error& e) {
        peak = 0;  // the percentage column says "-"
        std::printf("device: %s; peak DRAM bandwidth unknown: %s\n", name.c_str(), e.what());
      }
      std::printf(
          "times measured with CUDA events: a block's median over %d calls, each kernel's mean\n",
          reps);
    } else {
      std::printf(
          "device: the virtual GPU; times are its profiler's model of an H100 SXM (3 us launch +\n"
          "max(DRAM traffic at %.0f GB/s, instruction issue)), not measured\n",
          peak / 1e9);
    }
    std::printf(
        "blocks at %lld x %lld; ideal MB reads each input once and writes each output once; GB/s "
        "is\nideal bytes over the block's time, against the peak\n\n",
        static_cast<long long>(rows), static_cast<long long>(hidden));
    ModeledTimes modeled;
    if (!modeled_path.empty()) modeled = read_modeled(modeled_path);
    std::ofstream write_modeled;
    if (!write_path.empty()) {
      write_modeled.open(write_path);
      KILN_CHECK(write_modeled, "bench_bandwidth: cannot write '{}'", write_path);
    }
    Bench bench(on_gpu, peak, reps, modeled_path.empty() ? nullptr : &modeled,
                write_path.empty() ? nullptr : &write_modeled);
    std::printf("%-22s %-5s %7s %9s %9s %9s %8s\n", "block", "dtype", "kernels", "ideal MB",
                on_gpu ? "time us" : "model us", "GB/s", "of peak");
    for (DType dtype : {DType::f32, DType::bf16}) {
      Tensor x = randn({rows, hidden}).to(dtype).to(cuda);
      Tensor r = randn({rows, hidden}).to(dtype).to(cuda);
      Tensor w = randn({hidden}).to(dtype).to(cuda), b = randn({hidden}).to(dtype).to(cuda);
      Tensor target = randint(0, hidden, {rows}, DType::i64).to(cuda);
      bench.run("bias + GELU", dtype,
                [](auto& in) { return std::vector<Tensor>{gelu(in[0] + in[1])}; }, {x, b});
      bench.run(
          "residual + LayerNorm", dtype,
          [](auto& in) {
            Tensor h = in[0] + in[1];
            return std::vector<Tensor>{h, layer_norm(h, {in[2].size(0)}, in[2], Tensor(), 1e-5)};
          },
          {x, r, w});
      bench.run("softmax", dtype,
                [](auto& in) { return std::vector<Tensor>{softmax(in[0], -1) * in[1]}; }, {x, b});
      bench.run("log_softmax", dtype,
                [](auto& in) { return std::vector<Tensor>{log_softmax(in[0], -1) + in[1]}; },
                {x, b});
      bench.run("RMSNorm", dtype,
                [](auto& in) {
                  return std::vector<Tensor>{rms_norm(in[0], {in[1].size(0)}, in[1], 1e-6)};
                },
                {x, w});
      bench.run("cross-entropy", dtype,
                [](auto& in) { return std::vector<Tensor>{cross_entropy(in[0], in[1])}; },
                {x, target});
      bench.run("SiLU gate", dtype,
                [](auto& in) { return std::vector<Tensor>{in[0] * silu(in[1])}; }, {x, r});
    }
    bench.print_kernels();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_bandwidth: %s\n", e.what());
    return 1;
  }
  return 0;
}
