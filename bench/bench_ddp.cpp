// Data-parallel training of an MLP with at least 4 gradient buckets, on 1, 2 and 4 ranks on
// this machine (Gloo on loopback, CPU tensors), 128 rows per rank, each rank started by the
// launcher of `kiln launch` (tools/launch.h). Per warm step, rank 0 prints: step time; bytes this
// rank wrote to its sockets (/proc/self/io) against the ring ideal 2(N-1)/N x gradient bytes; the
// fraction of the buckets' all-reduce time the backward hid; peak optimizer state per rank, AdamW
// alone and under ZeRO-1, and the bytes a ZeRO-1 step sends (reduce-scatter and all-gather: the
// same ideal). KILN_BENCH_STEPS: warm steps (default 5); KILN_BENCH_RANKS: a comma list (default
// 1,2,4).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/nn.h"
#include "autograd/optim.h"
#include "dist/ddp.h"
#include "dist/zero.h"
#include "tools/launch.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::int64_t kWidth = 512, kLayers = 8, kBatch = 128;  // rows per rank

class Mlp : public nn::Module {
 public:
  explicit Mlp(Generator& gen) {
    layers_.reserve(kLayers);
    for (std::int64_t i = 0; i < kLayers; ++i) {
      layers_.emplace_back(std::make_unique<nn::Linear>(kWidth, kWidth, true, DType::f32, &gen));
      register_module("fc" + std::to_string(i), *layers_.back());
    }
  }
  Tensor forward(Tensor x) const {
    for (const auto& l : layers_) x = tanh((*l)(x));
    return x;
  }

 private:
  std::vector<std::unique_ptr<nn::Linear>> layers_;
};

std::int64_t state_bytes(const optim::Optimizer& opt) {
  std::int64_t bytes = 0;
  for (const auto& [name, t] : opt.state_dict())
    if (name.rfind("state.", 0) == 0)
      bytes += t.numel() * static_cast<std::int64_t>(itemsize(t.dtype()));
  return bytes;
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

int steps_from_env() {
  const char* v = std::getenv("KILN_BENCH_STEPS");
  return v ? std::max(1, std::atoi(v)) : 5;
}

// One rank: DDP with AdamW for the warm steps, then ZeRO-1's state for comparison.
int run_rank() {
  dist::init_process_group("gloo");
  int n = dist::world_size(), r = dist::rank();
  Generator gen(1);
  Mlp model(gen);
  dist::DdpOptions options;
  options.bucket_cap_mb = 1.01;  // a layer's weight and bias per bucket: 8 buckets
  dist::DistributedDataParallel ddp(model, options);
  optim::AdamW opt(model.parameters(), 1e-3);
  Generator data(2 + static_cast<std::uint64_t>(r));
  Tensor x = randn({kBatch, kWidth}, DType::f32, &data);
  std::int64_t grad_bytes = 0;
  for (const auto& p : model.parameters()) grad_bytes += p.numel() * 4;
  int steps = steps_from_env();
  double ms = 0, hidden = 0, comm = 0;
  std::uint64_t bytes = 0;
  for (int s = -2; s < steps; ++s) {  // two warm-up steps
    auto start = Clock::now();
    std::uint64_t before = dist::bytes_written();
    Tensor loss = square(model.forward(x)).mean();
    loss.backward();
    opt.step();
    opt.zero_grad();
    if (s < 0) continue;
    ms += ms_since(start);
    bytes += dist::bytes_written() - before;
    hidden += ddp.stats().hidden_seconds;
    comm += ddp.stats().comm_seconds;
  }
  std::int64_t adamw_state = state_bytes(opt);
  Mlp sharded(gen);
  dist::ZeroRedundancyOptimizer zero(sharded.parameters(), [](std::vector<Tensor> ps) {
    return std::make_unique<optim::AdamW>(std::move(ps), 1e-3);
  });
  std::uint64_t zero_bytes = 0;
  for (int s = -1; s < steps; ++s) {  // one warm-up step
    square(sharded.forward(x)).mean().backward();
    std::uint64_t before = dist::bytes_written();
    zero.step();
    if (s >= 0) zero_bytes += dist::bytes_written() - before;
    zero.zero_grad();
  }
  if (r == 0) {
    double ideal = 2.0 * (n - 1) / n * static_cast<double>(grad_bytes);
    std::printf("ranks %d: %zu buckets, gradients %.2f MB\n", n, ddp.bucket_parameters().size(),
                grad_bytes / 1e6);
    std::printf("  step %.1f ms\n", ms / steps);
    std::printf("  bytes sent per rank per step %.2f MB, ring ideal %.2f MB (%s)\n",
                bytes / 1e6 / steps, ideal / 1e6,
                ideal > 0 ? (std::to_string(bytes / steps / ideal).substr(0, 4) + "x").c_str()
                          : "no peers");
    std::printf("  all-reduce %.2f ms per step, %.0f%% hidden behind the backward\n",
                1e3 * comm / steps, comm > 0 ? 100 * hidden / comm : 100.0);
    std::printf("  optimizer state per rank: AdamW %.2f MB, ZeRO-1 %.2f MB (1/%d)\n",
                adamw_state / 1e6, zero.state_bytes() / 1e6, n);
    std::printf(
        "  ZeRO-1 step (reduce-scatter + all-gather) sent %.2f MB per rank, ideal %.2f MB\n",
        zero_bytes / 1e6 / steps, ideal / 1e6);
  }
  dist::destroy_process_group();
  return 0;
}

std::vector<int> ranks_from_env() {
  const char* v = std::getenv("KILN_BENCH_RANKS");
  std::stringstream list(v ? v : "1,2,4");
  std::vector<int> ranks;
  for (std::string item; std::getline(list, item, ',');) ranks.push_back(std::stoi(item));
  return ranks;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::string(argv[1]) == "--rank") return run_rank();
    std::printf(
        "bench_ddp: an MLP of %lld Linear(%lld, %lld) + tanh, global batch %lld, AdamW; "
        "Gloo on loopback, CPU tensors\n",
        static_cast<long long>(kLayers), static_cast<long long>(kWidth),
        static_cast<long long>(kWidth), static_cast<long long>(kBatch));
    std::fflush(stdout);
    for (int n : ranks_from_env()) {
      tools::LaunchOptions launch;
      launch.processes = n;
      launch.master_port = 0;
      launch.command = {argv[0], "--rank"};
      if (tools::launch(launch) != 0) return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ddp: %s\n", e.what());
    return 1;
  }
  return 0;
}
