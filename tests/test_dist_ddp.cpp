// DistributedDataParallel and ZeRO-1 on 2 and 4 ranks (Gloo on loopback), on CPU tensors and on
// each rank's virtual GPU, eager and compiled: 5 AdamW steps give the parameters of one process
// training on the concatenated batch; misuse is an error that names what is wrong.
#include <boost/test/unit_test.hpp>

#include "support/device_compare.h"
#include "support/dist_model.h"
#include "support/dist_run.h"

using namespace kiln;

namespace {

Device device_of(const std::string& name) {
  return name == "cuda" ? Device::cuda() : Device::cpu();
}

// One process, the whole batch: rank 0's initial parameters (seed 7).
std::map<std::string, Tensor> single_process(const std::string& device, bool compiled) {
  test::DistMlp model(7);
  Device d = device_of(device);
  model.to(d);
  auto opt = test::dist_adamw(model.parameters());
  test::train_dist_mlp(
      model, 0, test::kRows, d, compiled, [&] { opt->step(); }, [&] { opt->zero_grad(); });
  std::map<std::string, Tensor> params;
  for (const auto& [name, t] : model.named_parameters())
    params[name] = t.detach().to(Device::cpu());
  return params;
}

void check_against(const std::map<std::string, Tensor>& want, const test::TempDir& dir, int n,
                   double tolerance) {
  for (int r = 0; r < n; ++r) {
    auto got = test::rank_results(dir, r);
    for (const auto& [name, w] : want) {
      BOOST_TEST_REQUIRE(got.count(name) == 1u, "rank " << r << " wrote no " << name);
      double err = test::relative_error(got[name], w);
      BOOST_TEST(err <= tolerance, "rank " << r << " " << name << ": error " << err);
    }
  }
}

void check_training(int n, const std::string& mode, const std::string& device, bool compiled,
                    double tolerance = 2e-5) {
  test::TempDir dir;
  auto run = test::launch_workers(n, {mode, device, compiled, ""}, dir);
  BOOST_TEST_REQUIRE(run.status == 0, run.output);
  auto want = single_process(device, compiled);
  check_against(want, dir, n, tolerance);
  if (mode != "ddp") return;
  // Rank 0's checkpoint is the single-process one: its keys in order, dtypes, shapes, values.
  auto saved = load_safetensors((dir / "checkpoint.safetensors").string()).tensors;
  test::DistMlp layout(7);
  auto names = layout.state_dict();
  BOOST_TEST_REQUIRE(saved.size() == names.size());
  for (std::size_t i = 0; i < saved.size(); ++i) {
    BOOST_TEST(saved[i].first == names[i].first);
    BOOST_TEST((saved[i].second.dtype() == DType::f32));
    BOOST_TEST(test::relative_error(saved[i].second, want.at(names[i].first)) <= tolerance,
               names[i].first);
  }
}

}  // namespace

struct Run {
  int ranks;
  const char* device;
  bool compiled;
};

BOOST_AUTO_TEST_CASE(ddp_trains_as_one_process_on_the_whole_batch) {
  for (Run run :
       {Run{2, "cpu", false}, Run{4, "cpu", false}, Run{2, "cpu", true}, Run{4, "cpu", true},
        Run{2, "cuda", false}, Run{4, "cuda", false}, Run{2, "cuda", true}, Run{4, "cuda", true}}) {
    BOOST_TEST_CONTEXT(run.ranks << " ranks on " << run.device
                                 << (run.compiled ? ", compiled" : ", eager")) {
      check_training(run.ranks, "ddp", run.device, run.compiled);
    }
  }
}

// ZeRO-1 reduces and steps the same elements in shards: DDP's parameters, which are those of
// one process (the case above).
BOOST_AUTO_TEST_CASE(zero_1_gives_the_parameters_of_ddp) {
  for (Run run : {Run{2, "cpu", false}, Run{4, "cpu", false}, Run{2, "cuda", true}}) {
    BOOST_TEST_CONTEXT(run.ranks << " ranks on " << run.device
                                 << (run.compiled ? ", compiled" : ", eager")) {
      check_training(run.ranks, "zero", run.device, run.compiled);
    }
  }
}

BOOST_AUTO_TEST_CASE(the_bf16_compression_hook_trains_close_to_one_process) {
  check_training(2, "ddp_bf16", "cpu", false, 1e-2);
}

// Each rank's buckets go out while its backward still runs, in reverse registration order.
BOOST_AUTO_TEST_CASE(buckets_are_all_reduced_during_the_backward) {
  test::TempDir dir;
  auto run = test::launch_workers(2, {"ddp", "cpu", false, ""}, dir);
  BOOST_TEST_REQUIRE(run.status == 0, run.output);
  for (int r = 0; r < 2; ++r) {
    auto got = test::rank_results(dir, r);
    std::int64_t buckets = got["stats.buckets"].item<std::int64_t>();
    BOOST_TEST(buckets >= 3);
    BOOST_TEST(got["stats.launched_in_backward"].item<std::int64_t>() == buckets);
  }
}

// no_sync: the first micro-batch accumulates locally, the second reduces the sums.
BOOST_AUTO_TEST_CASE(no_sync_accumulates_locally_and_the_next_backward_reduces_the_sum) {
  test::TempDir dir;
  int n = 2;
  auto run = test::launch_workers(n, {"ddp_accumulate", "cpu", false, ""}, dir);
  BOOST_TEST_REQUIRE(run.status == 0, run.output);
  test::DistMlp model(7);
  auto opt = test::dist_adamw(model.parameters());
  std::int64_t rows = test::kRows / n;
  for (int s = 0; s < test::kSteps; ++s) {
    for (int half = 0; half < 2; ++half) {
      std::vector<Tensor> xs, ys;
      for (int r = 0; r < n; ++r) {
        auto [x, y] = test::dist_batch(s, r * rows + half * rows / 2, rows / 2, Device::cpu());
        xs.push_back(x);
        ys.push_back(y);
      }
      mse_loss(model.forward(cat(xs)), cat(ys)).backward();
    }
    opt->step();
    opt->zero_grad();
  }
  std::map<std::string, Tensor> want;
  for (const auto& [name, t] : model.named_parameters()) want[name] = t.detach();
  check_against(want, dir, n, 2e-5);
}

BOOST_AUTO_TEST_CASE(a_parameter_without_a_gradient_is_an_error_naming_it) {
  test::TempDir dir;
  auto run = test::launch_workers(2, {"unused", "cpu", false, ""}, dir);
  BOOST_TEST(run.status != 0);
  BOOST_TEST(run.output.find("spare.weight, spare.bias got no gradient") != std::string::npos,
             run.output);
  BOOST_TEST(run.output.find("find_unused_parameters") != std::string::npos, run.output);
}

BOOST_AUTO_TEST_CASE(find_unused_parameters_reduces_the_others_as_usual) {
  test::TempDir dir;
  auto run = test::launch_workers(2, {"unused_allowed", "cpu", false, ""}, dir);
  BOOST_TEST_REQUIRE(run.status == 0, run.output);
  check_against(single_process("cpu", false), dir, 2, 2e-5);
}

BOOST_AUTO_TEST_CASE(different_models_on_different_ranks_are_an_error_naming_both) {
  test::TempDir dir;
  auto ranks = test::spawn_workers(2, {"mismatched_model", "cpu", false, ""}, dir);
  for (int r = 0; r < 2; ++r) {
    BOOST_TEST(ranks[r].status == 1, ranks[r].output);
    BOOST_TEST(ranks[r].output.find("fc1.weight f32 [16, 8]") != std::string::npos,
               ranks[r].output);
    BOOST_TEST(ranks[r].output.find("fc1.weight f32 [12, 8]") != std::string::npos,
               ranks[r].output);
  }
}

namespace {

// The losses gpt_train printed ("step N  loss X", with a "[rank 0] " prefix under kiln launch).
std::vector<double> printed_losses(const std::string& output) {
  std::vector<double> losses;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    auto at = line.find("loss ");
    if (line.find("step ") == std::string::npos || at == std::string::npos) continue;
    losses.push_back(std::stod(line.substr(at + 5)));
  }
  return losses;
}

}  // namespace

// The demo: gpt_train --ddp on 2 and 4 ranks prints the loss curve of one process on the whole
// batch (each loss the mean over ranks, rounded to 4 decimals as printed).
BOOST_AUTO_TEST_CASE(gpt_train_ddp_gives_the_loss_curve_of_one_process) {
  std::string args = " --steps 6 --log-every 1";
  auto single = test::run_command(std::string("timeout 120 ") + KILN_GPT_TRAIN + args);
  BOOST_TEST_REQUIRE(single.status == 0, single.output);
  std::vector<double> want = printed_losses(single.output);
  BOOST_TEST_REQUIRE(want.size() == 6u, single.output);
  for (int n : {2, 4}) {
    auto run = test::run_command("timeout 120 " + std::string(KILN_TOOL) + " launch -n " +
                                 std::to_string(n) + " --master-port 0 -- " + KILN_GPT_TRAIN +
                                 args + " --ddp");
    BOOST_TEST_REQUIRE(run.status == 0, run.output);
    std::vector<double> got = printed_losses(run.output);
    BOOST_TEST_REQUIRE(got.size() == want.size(), run.output);
    for (std::size_t i = 0; i < want.size(); ++i)
      BOOST_TEST(std::abs(got[i] - want[i]) <= 2e-4, n << " ranks, step " << i + 1);
  }
}
