// A seeded differential fuzzer for the compiled backward: the codegen fuzzer's random programs
// with a loss on top become small models whose x [rows, cols] and y [cols] are parameters (z is
// data). Each model trains 3 SGD-with-momentum steps eagerly on the CPU and, from the same
// values, compiled on the CUDA device (the virtual GPU); gradients are compared at every step
// and parameters after the last. KILN_FUZZ_TRAIN_MODELS sets how many models must be compared
// (default 300), KILN_FUZZ_SEED the first seed.
#include <boost/test/unit_test.hpp>

#include <cstdlib>

#include "autograd/ops.h"
#include "autograd/optim.h"
#include "jit/compile.h"
#include "support/fuzz_program.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// Where two tensors differ beyond the tolerance, or empty.
std::string difference(const char* what, const Tensor& got, const Tensor& want) {
  if (got.defined() != want.defined())
    return fmt::format("{}: {} compiled, {} eagerly", what, got.defined() ? "defined" : "none",
                       want.defined() ? "defined" : "none");
  if (!got.defined()) return "";
  if (got.shape() != want.shape()) return fmt::format("{}: shape differs", what);
  Tensor a = got.to(Device::cpu()).to(DType::f64).contiguous();
  Tensor b = want.to(DType::f64).contiguous();
  const double* pa = static_cast<const double*>(a.raw_data());
  const double* pb = static_cast<const double*>(b.raw_data());
  for (std::int64_t e = 0; e < a.numel(); ++e) {
    if (std::isnan(pa[e]) && std::isnan(pb[e])) continue;
    if (!(std::abs(pa[e] - pb[e]) <= 1e-3 * (1 + std::abs(pb[e]))))
      return fmt::format("{} element {}: compiled {} vs eager {}", what, e, pa[e], pb[e]);
  }
  return "";
}

// The model's loss: every output weighted by a fixed random tensor of its shape, averaged.
Tensor loss_of(const std::vector<Tensor>& outputs, const std::vector<Tensor>& weights) {
  Tensor loss;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    Tensor term = mean(outputs[i] * weights[i]);
    loss = loss.defined() ? loss + term : term;
  }
  return loss;
}

enum class Outcome { compared, skipped };

// Trains `p` both ways; `why` is set when they disagree.
Outcome train_both(const Program& p, std::uint64_t seed, std::string& why) {
  Generator gen(seed);
  auto [x0, y0, z] = random_inputs(p, gen);
  std::vector<Tensor> weights;
  try {
    for (const auto& o : run_program(p, x0, y0, z))
      weights.push_back(randn(o.shape(), DType::f32, &gen));
  } catch (const Error&) {
    return Outcome::skipped;  // not a valid program (a shape mismatch)
  }
  Tensor xe = x0.clone().requires_grad_(), ye = y0.clone().requires_grad_();
  Tensor xc = x0.to(Device::cuda()).requires_grad_(), yc = y0.to(Device::cuda()).requires_grad_();
  Tensor zc = z.to(Device::cuda());
  std::vector<Tensor> wc;
  for (const auto& w : weights) wc.push_back(w.to(Device::cuda()));
  auto f = jit::compile([&](const Tensor& a, const Tensor& b, const Tensor& c) {
    return loss_of(run_program(p, a, b, c), wc);
  });
  optim::SGD eager_opt({xe, ye}, 0.05, 0.9), compiled_opt({xc, yc}, 0.05, 0.9);
  for (int step = 0; step < 3; ++step) {
    Tensor le = loss_of(run_program(p, xe, ye, z), weights);
    if (!le.requires_grad()) return Outcome::skipped;  // the outputs do not depend on x or y
    eager_opt.zero_grad();
    compiled_opt.zero_grad();
    le.backward();
    try {
      f(xc, yc, zc).backward();
    } catch (const std::exception& e) {
      why = fmt::format("step {}: compiled training failed: {}", step, e.what());
      return Outcome::compared;
    }
    if (step == 0 && !f.core().aot(0)) {
      why = "the compiled call was not compiled for training: " + f.explain();
      return Outcome::compared;
    }
    for (auto [name, got, want] :
         {std::tuple{"x.grad", xc.grad(), xe.grad()}, std::tuple{"y.grad", yc.grad(), ye.grad()}}) {
      why = difference(name, got, want);
      if (!why.empty()) {
        why = fmt::format("step {}: {}", step, why);
        return Outcome::compared;
      }
    }
    eager_opt.step();
    compiled_opt.step();
  }
  why = difference("x after 3 steps", xc, xe);
  if (why.empty()) why = difference("y after 3 steps", yc, ye);
  return Outcome::compared;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fuzz_training)

BOOST_AUTO_TEST_CASE(random_models_trained_compiled_match_eager_training) {
  std::uint64_t wanted = env_number("KILN_FUZZ_TRAIN_MODELS", 300);
  std::uint64_t seed = env_number("KILN_FUZZ_SEED", 1);
  std::uint64_t compared = 0;
  int failures = 0;
  for (; compared < wanted && failures < 3; ++seed) {
    Program p = random_program(seed);
    std::string why;
    if (train_both(p, seed, why) == Outcome::skipped) continue;
    ++compared;
    if (why.empty()) continue;
    ++failures;
    BOOST_ERROR(
        fmt::format("training fuzz seed {} (KILN_FUZZ_SEED={} KILN_FUZZ_TRAIN_MODELS=1): "
                    "{}\n{}",
                    seed, seed, why, describe(p)));
  }
  BOOST_TEST_MESSAGE("models compared: " << compared);
  BOOST_TEST(compared >= wanted);
  BOOST_TEST(failures == 0);
}

BOOST_AUTO_TEST_SUITE_END()
