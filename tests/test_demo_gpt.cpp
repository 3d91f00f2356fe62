// The GPT demo (demos/gpt_model.h, the model and training step demos/gpt_train.cpp runs) at a
// small size on the CUDA device (the virtual GPU here): ten training steps eagerly and with
// the loss compiled (and compiled with every block checkpointed), from the same initialization on
// the same batches, must give the same losses and make the held-out loss fall.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <vector>

#include "demos/gpt_model.h"
#include "jit/codegen/launch_stats.h"
#include "runtime/cuda/host_sync.h"
#include "runtime/cuda_backend.h"

using namespace kiln;

namespace {

struct RunLosses {
  double before = 0;  // held-out loss at initialization
  std::vector<double> steps;
  double after = 0;  // held-out loss after training
  jit::CompiledStats stats;
};

RunLosses run(bool compiled, bool checkpoint_blocks = false) {
  gpt::GptConfig model;  // vocab 16, seq 8, d_model 32, 2 heads
  model.layers = 1;
  model.checkpoint_blocks = checkpoint_blocks;
  gpt::TrainConfig train;
  train.steps = 10;
  train.batch = 8;
  train.warmup_steps = 1;
  gpt::Trainer trainer(model, train, Device::cuda(), compiled);
  Generator held_out(99);
  gpt::TaskBatch eval = gpt::make_batch(model, 16, model.seq_len, held_out, Device::cuda());
  RunLosses r;
  r.before = trainer.evaluate(eval);
  for (std::int64_t i = 0; i < train.steps; ++i) r.steps.push_back(trainer.step());
  r.after = trainer.evaluate(eval);
  if (trainer.compiled()) r.stats = trainer.compiled()->stats();
  return r;
}

bool close(double a, double b) {
  return std::fabs(a - b) <= 1e-5 * std::fabs(a);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(demo_gpt)

BOOST_AUTO_TEST_CASE(compiled_training_matches_eager_and_the_loss_falls) {
  RunLosses eager = run(false);
  RunLosses compiled = run(true);
  BOOST_TEST_REQUIRE(compiled.steps.size() == eager.steps.size());
  for (std::size_t i = 0; i < eager.steps.size(); ++i) {
    BOOST_TEST_CONTEXT("step " << i + 1 << ": eager " << eager.steps[i] << ", compiled "
                               << compiled.steps[i]) {
      BOOST_TEST(std::isfinite(eager.steps[i]));
      BOOST_TEST(close(eager.steps[i], compiled.steps[i]));
    }
  }
  // The no-grad evaluations run the compiled function's generated kernels.
  BOOST_TEST_CONTEXT("held-out before: eager " << eager.before << ", compiled " << compiled.before
                                               << "; after: eager " << eager.after << ", compiled "
                                               << compiled.after) {
    BOOST_TEST(close(eager.before, compiled.before));
    BOOST_TEST(close(eager.after, compiled.after));
    BOOST_TEST(eager.after < eager.before - 0.1);
  }
  BOOST_TEST(compiled.stats.calls == 12);         // 10 steps and 2 evaluations
  BOOST_TEST(compiled.stats.kernel_calls == 12);  // the steps' forward + backward too
  // Checkpointing every block changes what is saved, not what is computed.
  RunLosses checkpointed = run(true, true);
  for (std::size_t i = 0; i < eager.steps.size(); ++i)
    BOOST_TEST(close(eager.steps[i], checkpointed.steps[i]),
               "step " << i + 1 << ": eager " << eager.steps[i] << ", checkpointed "
                       << checkpointed.steps[i]);
  BOOST_TEST(checkpointed.stats.kernel_calls == 12);
}

BOOST_AUTO_TEST_CASE(a_warm_compiled_training_step_never_waits_on_the_host) {
  // Forward, backward, clipping (the norm stays on the device), AdamW and the schedule, warm
  // (the allocator's cache settles over the first few steps): no copy to the host, no
  // synchronization, no NVRTC compile, no allocation from the backend. Reading a loss is the
  // only wait, and the user's choice.
  gpt::GptConfig model;
  model.layers = 1;
  gpt::TrainConfig train;
  train.steps = 10;
  train.batch = 8;
  train.warmup_steps = 1;
  gpt::Trainer trainer(model, train, Device::cuda(), true);
  for (int i = 0; i < 4; ++i) trainer.step();  // compiles, fills the allocator's cache
  auto& syncs = cuda::host_sync_stats();
  auto& allocator = cuda_allocator();
  const auto copies = syncs.device_to_host_copies.load(), waits = syncs.synchronizations.load();
  const auto compiles = jit::codegen::launch_stats().compiles.load();
  const auto backend_allocs = allocator.stats().num_backend_allocs;
  std::vector<Tensor> losses;
  for (int i = 0; i < 3; ++i) {
    losses.push_back(trainer.forward_backward());
    trainer.optimizer_step();
  }
  BOOST_TEST(syncs.device_to_host_copies.load() == copies);
  BOOST_TEST(syncs.synchronizations.load() == waits);
  BOOST_TEST(jit::codegen::launch_stats().compiles.load() == compiles);
  BOOST_TEST(allocator.stats().num_backend_allocs == backend_allocs);
  // Reading a loss waits (it copies the value, and the device-check flags with it).
  BOOST_TEST(std::isfinite(losses.back().item()));
  BOOST_TEST(syncs.device_to_host_copies.load() > copies);
}

BOOST_AUTO_TEST_SUITE_END()
