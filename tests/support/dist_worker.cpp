// One rank of the data-parallel tests (test_dist_*), started by `kiln launch` or by a test's
// shell line with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set:
//   kiln_dist_worker MODE OUT_DIR DEVICE(cpu|cuda) [compiled]
// MODE: collectives (results of each collective), ddp, ddp_bf16, ddp_accumulate, zero (the
// trained parameters), die (rank 1 kills itself in its second backward), stall (rank 1 sleeps
// through a collective), mismatch (ranks pass different shapes), unused, unused_allowed,
// mismatched_model. Writes OUT_DIR/rank<R>.safetensors; on an Error prints it, exits 1.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

#include "autograd/safetensors.h"
#include "dist/ddp.h"
#include "dist/dist.h"
#include "dist/zero.h"
#include "support/dist_model.h"

using namespace kiln;

namespace {

using Results = std::vector<std::pair<std::string, Tensor>>;

Results collectives(Device d) {
  int r = dist::rank(), n = dist::world_size();
  Results out;
  auto f32 = [&](std::vector<float> v) { return from_vector(v).to(d); };
  Tensor a = f32({1.f * (r + 1), 2.f * (r + 1), 3.f * (r + 1)});
  dist::all_reduce(a, dist::ReduceOp::sum);
  out.emplace_back("sum", a);
  Tensor b = f32({1.f * (r + 1), 2.f * (r + 1), 3.f * (r + 1)});
  dist::all_reduce(b, dist::ReduceOp::avg);
  out.emplace_back("avg", b);
  Tensor c = f32({1.f * r, -1.f * r, 5.f});
  dist::all_reduce(c, dist::ReduceOp::max);
  out.emplace_back("max", c);
  Tensor h = f32({0.5f * (r + 1), 1.f}).to(DType::bf16);
  dist::all_reduce(h, dist::ReduceOp::sum);
  out.emplace_back("bf16_sum", h);
  Tensor i = from_vector(std::vector<std::int64_t>{r, 7}).to(d);
  dist::all_reduce(i, dist::ReduceOp::sum);
  out.emplace_back("i64_sum", i);
  // Not contiguous: the transpose of [[r, 2r, 3r], [4r, 5r, 6r]].
  Tensor t = mul(from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}), Scalar(r)).to(d);
  Tensor tt = t.t();
  dist::all_reduce(tt, dist::ReduceOp::sum);
  out.emplace_back("transposed_sum", t);
  Tensor e = full({2}, Scalar(r), DType::f32).to(d);
  dist::broadcast(e, n - 1);
  out.emplace_back("broadcast", e);
  Tensor g = zeros({2 * n}, DType::f32, d);
  dist::all_gather(g, f32({1.f * r, 10.f * r}));
  out.emplace_back("all_gather", g);
  std::vector<float> in;
  for (int k = 0; k < 2 * n; ++k) in.push_back(100.f * r + k);
  Tensor s = zeros({2}, DType::f32, d);
  dist::reduce_scatter(s, f32(in), dist::ReduceOp::sum);
  out.emplace_back("reduce_scatter", s);
  std::vector<float> small;
  for (int k = 0; k < 2 * n; ++k) small.push_back(1.f * r + k);
  Tensor sb = zeros({2}, DType::bf16, d);
  dist::reduce_scatter(sb, f32(small).to(DType::bf16), dist::ReduceOp::avg);
  out.emplace_back("reduce_scatter_avg_bf16", sb);
  Tensor w = f32({1.f * r});
  dist::Work work = dist::all_reduce_async(w, dist::ReduceOp::sum);
  work.wait();
  work.wait();
  out.emplace_back("async_sum", w);
  dist::barrier();
  return out;
}

Results params_of(const nn::Module& m) {
  Results out;
  for (const auto& [name, t] : m.named_parameters()) out.emplace_back(name, t.detach());
  return out;
}

Results train(const std::string& mode, const std::string& out_dir, Device d, bool compiled) {
  int r = dist::rank(), n = dist::world_size();
  std::int64_t rows = test::kRows / n;
  // Different initial values per rank: DDP's broadcast must make them rank 0's.
  std::int64_t hidden = mode == "mismatched_model" && r == 1 ? 12 : 16;
  bool extra = mode == "unused" || mode == "unused_allowed";
  test::DistMlp model(7 + static_cast<std::uint64_t>(r), hidden, extra);
  model.to(d);
  if (mode == "zero") {
    dist::ZeroRedundancyOptimizer zero(model.parameters(), test::dist_adamw);
    test::train_dist_mlp(
        model, r * rows, rows, d, compiled, [&] { zero.step(); }, [&] { zero.zero_grad(); });
    std::printf("zero: shard %lld of %lld elements, state %lld bytes\n",
                static_cast<long long>(zero.shard_numel()),
                static_cast<long long>(model.parameters().size()),
                static_cast<long long>(zero.state_bytes()));
    return params_of(model);
  }
  dist::DdpOptions options;
  options.bucket_cap_mb = 0.001;  // several buckets
  options.find_unused_parameters = mode == "unused_allowed";
  if (mode == "ddp_bf16") options.comm_hook = dist::CommHook::bf16_compress;
  dist::DistributedDataParallel ddp(model, options);
  auto opt = test::dist_adamw(model.parameters());
  int backwards = 0;
  if (mode == "ddp_accumulate") {
    // Two micro-batches a step: the first accumulates locally, the second reduces the sum.
    for (int s = 0; s < test::kSteps; ++s) {
      for (int half = 0; half < 2; ++half) {
        auto [x, y] = test::dist_batch(s, r * rows + half * rows / 2, rows / 2, d);
        Tensor loss = mse_loss(model.forward(x), y);
        if (half == 0) {
          auto guard = ddp.no_sync();
          loss.backward();
        } else {
          loss.backward();
        }
      }
      opt->step();
      opt->zero_grad();
    }
    return params_of(model);
  }
  test::train_dist_mlp(
      model, r * rows, rows, d, compiled,
      [&] {
        opt->step();
        ++backwards;
      },
      [&] { opt->zero_grad(); });
  if (r == 0) model.save(out_dir + "/checkpoint.safetensors");  // what a user checkpoints
  Results out = params_of(model);
  const dist::DdpStats& stats = ddp.stats();
  out.emplace_back("stats.buckets", from_vector(std::vector<std::int64_t>{stats.buckets}));
  out.emplace_back("stats.launched_in_backward",
                   from_vector(std::vector<std::int64_t>{stats.launched_in_backward}));
  return out;
}

// Rank 1 dies in its second step's backward, after its first buckets went out.
void die(Device d) {
  int r = dist::rank(), n = dist::world_size();
  test::DistMlp model(7);
  model.to(d);
  dist::DdpOptions options;
  options.bucket_cap_mb = 0.001;
  dist::DistributedDataParallel ddp(model, options);
  for (int s = 0; s < test::kSteps; ++s) {
    auto [x, y] = test::dist_batch(s, r * (test::kRows / n), test::kRows / n, d);
    Tensor loss = mse_loss(model.forward(x), y);
    if (s == 1 && r == 1) ::kill(::getpid(), SIGKILL);
    loss.backward();
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: kiln_dist_worker MODE OUT_DIR cpu|cuda [compiled]\n");
    return 2;
  }
  std::string mode = argv[1], out_dir = argv[2];
  Device d = std::string(argv[3]) == "cuda" ? Device::cuda() : Device::cpu();
  bool compiled = argc > 4 && std::string(argv[4]) == "compiled";
  try {
    dist::init_process_group("gloo");
    Results results;
    if (mode == "collectives") {
      results = collectives(d);
    } else if (mode == "die") {
      die(d);
    } else if (mode == "stall") {
      if (dist::rank() == 1)
        std::this_thread::sleep_for(dist::timeout() * 3 / 2);
      else
        dist::all_reduce(zeros({4}, DType::f32, d));
    } else if (mode == "mismatch") {
      dist::set_debug_checks(true);
      dist::all_reduce(zeros({3 + dist::rank()}, DType::f32, d));
    } else {
      results = train(mode, out_dir, d, compiled);
    }
    if (!results.empty())
      save_safetensors(out_dir + "/rank" + std::to_string(dist::rank()) + ".safetensors", results);
    dist::destroy_process_group();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %s: error: %s\n", std::getenv("RANK"), e.what());
    return 1;
  }
  return 0;
}
