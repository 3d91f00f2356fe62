// The model zoo (demos/zoo/): for each model, five AdamW steps of compiled training on the CUDA
// device (the virtual GPU here) in f32 and under bf16 autocast, and of eager training on CUDA in
// f32, against the same model trained eagerly on the CPU in f64 from the same initial weights on
// the same batches. Losses and final parameters must agree within the dtype's tolerance, as a
// norm-relative error (each step's loss; the parameters as one vector). GPT-2 and BERT train with
// dropout: each model draws its masks from a generator of its own seeded as its weights are, so
// every run draws the same masks in the same order (a uniform is the same number in f32 and f64).
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "demos/zoo/catalog.h"

using namespace kiln;

namespace {

constexpr int kSteps = 5;

struct Trajectory {
  std::vector<double> losses;
  std::vector<Tensor> parameters;  // f64 on the host, after the last step
  // Per parameter element: whether the loss depends on it (the f64 reference's first-step
  // gradient is not rounding noise). Filled for the reference only.
  std::vector<std::vector<bool>> influential;
};

// Elements whose gradient is below 1e-10 of the largest: the loss does not depend on them in
// exact arithmetic (the key bias under softmax, a bias that a LayerNorm then removes), so their
// gradients are rounding noise, which Adam divides by its own magnitude into steps of about lr
// whatever the precision. Their values say nothing about the step being right.
std::vector<std::vector<bool>> influential_elements(const std::vector<Tensor>& grads) {
  double largest = 0;
  std::vector<std::vector<double>> values;
  for (const Tensor& g : grads) {
    values.push_back(g.to(Device::cpu()).to(DType::f64).to_vector<double>());
    for (double v : values.back()) largest = std::max(largest, std::fabs(v));
  }
  std::vector<std::vector<bool>> out;
  for (const auto& v : values) {
    out.emplace_back(v.size());
    for (std::size_t j = 0; j < v.size(); ++j) out.back()[j] = std::fabs(v[j]) > 1e-10 * largest;
  }
  return out;
}

Trajectory train(const zoo::CatalogEntry& entry, DType dtype, Device device, bool compiled,
                 std::optional<DType> autocast = std::nullopt) {
  zoo::TrainOptions options;
  options.compiled = compiled;
  options.autocast = autocast;
  options.name = entry.name;
  auto run = entry.start(1, dtype, device, options);
  Generator data(2);
  Trajectory out;
  for (int s = 0; s < kSteps; ++s) {
    out.losses.push_back(run->step(entry.step_batches(data, device, dtype)));
    if (s == 0) {
      std::vector<Tensor> grads;
      for (const Tensor& p : run->module().parameters()) grads.push_back(p.grad());
      out.influential = influential_elements(grads);
    }
  }
  // Every compiled call ran the generated forward and backward (no fallback to eager).
  if (compiled)
    BOOST_TEST(run->compiled()->stats().kernel_calls == kSteps * entry.micro_batches,
               entry.name << ": " << run->compiled()->stats().kernel_calls << " compiled calls");
  for (const Tensor& p : run->module().parameters())
    out.parameters.push_back(p.detach().to(Device::cpu()).to(DType::f64));
  return out;
}

// ||got - want|| / ||want|| over every parameter as one vector, the elements the loss depends on.
double parameter_error(const Trajectory& got, const Trajectory& want) {
  BOOST_TEST_REQUIRE(got.parameters.size() == want.parameters.size());
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < want.parameters.size(); ++i) {
    BOOST_TEST_REQUIRE(got.parameters[i].shape() == want.parameters[i].shape());
    std::vector<double> a = got.parameters[i].to_vector<double>();
    std::vector<double> b = want.parameters[i].to_vector<double>();
    for (std::size_t j = 0; j < b.size(); ++j) {
      if (!want.influential[i][j]) continue;
      diff += (a[j] - b[j]) * (a[j] - b[j]);
      norm += b[j] * b[j];
    }
  }
  return std::sqrt(diff) / std::sqrt(norm);
}

struct Tolerance {
  double loss, parameters;
};

// Returns the parameters' error.
double check_against(const Trajectory& got, const Trajectory& want, Tolerance tolerance,
                     const std::string& what) {
  BOOST_TEST_REQUIRE(got.losses.size() == want.losses.size());
  double worst_loss = 0;
  for (std::size_t s = 0; s < want.losses.size(); ++s) {
    const double error = std::fabs(got.losses[s] - want.losses[s]) / std::fabs(want.losses[s]);
    worst_loss = std::max(worst_loss, std::isfinite(error) ? error : INFINITY);
    BOOST_TEST(error <= tolerance.loss, what << " step " << s + 1 << ": loss " << got.losses[s]
                                             << ", f64 CPU " << want.losses[s]);
  }
  const double params = parameter_error(got, want);
  BOOST_TEST(params <= tolerance.parameters, what << ": final parameters off by " << params);
  BOOST_TEST_MESSAGE(what << ": worst loss error " << worst_loss << " (tolerance " << tolerance.loss
                          << "), parameters " << params << " (tolerance " << tolerance.parameters
                          << ")");
  return params;
}

// f32 kernels against f64 over five steps: rounding differences only. bf16 autocast rounds every
// matmul operand to 8 significant bits.
constexpr Tolerance kF32Tolerance{1e-5, 1e-5};
constexpr Tolerance kBf16Tolerance{1e-2, 3e-2};

void check_model(const zoo::CatalogEntry& entry) {
  const Trajectory reference = train(entry, DType::f64, Device::cpu(), false);
  std::size_t left_out = 0, total = 0;
  for (const auto& mask : reference.influential) {
    total += mask.size();
    left_out += std::count(mask.begin(), mask.end(), false);
  }
  BOOST_TEST(left_out * 20 < total, entry.name << ": " << left_out << " of " << total
                                               << " parameter elements do not move the loss");
  BOOST_TEST_MESSAGE(entry.name << ": " << left_out << " of " << total
                                << " parameter elements do not move the loss (not compared)");
  // The reference itself learns: the loss falls over the five steps.
  BOOST_TEST(reference.losses.back() < reference.losses.front(),
             entry.name << " f64 CPU losses " << reference.losses.front() << " -> "
                        << reference.losses.back());
  const double f32 = check_against(train(entry, DType::f32, Device::cuda(), true), reference,
                                   kF32Tolerance, entry.name + " compiled f32");
  const double bf16 =
      check_against(train(entry, DType::f32, Device::cuda(), true, DType::bf16), reference,
                    kBf16Tolerance, entry.name + " compiled bf16 autocast");
  // Autocast took effect: bf16 matmuls leave far more error than f32 (measured: 1e3 to 1e4 times).
  BOOST_TEST(bf16 > 100 * f32, entry.name << ": bf16 error " << bf16 << ", f32 " << f32);
  check_against(train(entry, DType::f32, Device::cuda(), false), reference, kF32Tolerance,
                entry.name + " eager f32");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(model_zoo)

BOOST_AUTO_TEST_CASE(gpt2_trains_on_cuda_as_in_f64_on_the_cpu) {
  check_model(kiln::zoo::gpt2_entry());
}

BOOST_AUTO_TEST_CASE(llama_head_dim_8_trains_on_cuda_as_in_f64_on_the_cpu) {
  check_model(kiln::zoo::llama_entry(8));
}

BOOST_AUTO_TEST_CASE(llama_head_dim_16_trains_on_cuda_as_in_f64_on_the_cpu) {
  check_model(kiln::zoo::llama_entry(16));
}

BOOST_AUTO_TEST_CASE(vit_trains_on_cuda_as_in_f64_on_the_cpu) {
  check_model(kiln::zoo::vit_entry());
}

BOOST_AUTO_TEST_CASE(mixer_trains_on_cuda_as_in_f64_on_the_cpu) {
  check_model(kiln::zoo::mixer_entry());
}

BOOST_AUTO_TEST_CASE(neox_trains_on_cuda_as_in_f64_on_the_cpu) {
  check_model(kiln::zoo::neox_entry());
}

BOOST_AUTO_TEST_CASE(bert_trains_on_cuda_as_in_f64_on_the_cpu) {
  check_model(kiln::zoo::bert_entry());
}

// A dropout model's compiled step draws what its eager step draws: from the same seed, compiled
// and eager f32 on CUDA give the same losses over two steps. Dropout is on (the losses differ
// from the same model's without it), and off in eval mode (the loss equals the model's without).
BOOST_AUTO_TEST_CASE(dropout_steps_compiled_equal_eager_from_the_same_seed) {
  const std::pair<zoo::CatalogEntry, zoo::CatalogEntry> models[] = {
      {kiln::zoo::gpt2_entry(), kiln::zoo::gpt2_entry(1, 16, 0, 0)},
      {kiln::zoo::bert_entry(), kiln::zoo::bert_entry(1, 16, 0, 0)}};
  for (const auto& [with, without] : models) {
    BOOST_TEST_CONTEXT(with.name) {
      auto losses = [](const zoo::CatalogEntry& entry, bool compiled) {
        zoo::TrainOptions options;
        options.compiled = compiled;
        options.name = entry.name;
        auto run = entry.start(1, DType::f32, Device::cuda(), options);
        Generator data(2);
        std::vector<double> out;
        for (int s = 0; s < 2; ++s)
          out.push_back(run->step(entry.step_batches(data, Device::cuda())));
        return out;
      };
      const std::vector<double> eager = losses(with, false), compiled = losses(with, true),
                                plain = losses(without, false);
      for (std::size_t s = 0; s < eager.size(); ++s) {
        BOOST_TEST(std::fabs(compiled[s] - eager[s]) <= 1e-5 * std::fabs(eager[s]),
                   "step " << s + 1 << ": compiled " << compiled[s] << ", eager " << eager[s]);
        BOOST_TEST(
            std::fabs(plain[s] - eager[s]) > 1e-3 * std::fabs(plain[s]),
            "step " << s + 1 << ": " << eager[s] << " with dropout, " << plain[s] << " without");
      }
      // Eval mode: no draws, the same numbers as the model without dropout.
      zoo::TrainOptions options;
      options.name = with.name;
      auto a = with.start(1, DType::f32, Device::cuda(), options);
      auto b = without.start(1, DType::f32, Device::cuda(), options);
      a->module().eval();
      Generator data(2);
      const std::vector<zoo::Batch> batch = with.step_batches(data, Device::cuda());
      NoGradGuard no_grad;
      BOOST_TEST(a->forward(batch[0]).item() == b->forward(batch[0]).item());
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
