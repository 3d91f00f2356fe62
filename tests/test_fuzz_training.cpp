// A seeded differential fuzzer for compiled training: random models (tests/support/fuzz_model.h:
// linear layers with epilogues, norms, embeddings, gathers, cat/slice/pad/expand, attention with
// masks and GQA, checkpoint regions, autocast) are compiled for training on the CUDA device (the
// virtual GPU), and their output, loss and every parameter and input gradient are compared with
// the same model run eagerly on the CPU in f64 by a bound relative to each tensor's norm (see
// Tolerance). The loss is sum(out * R) with R random of O(1) entries, so gradients are O(1) and
// an error anywhere in a derivative moves the norm. The f64 gradient comes from the same
// derivative rules the compiled backward is traced from, so it is itself checked against
// central differences of the loss along random directions. A failure prints the seed and the
// model's layers.
//
// KILN_FUZZ_ITERS sets the number of models (default 300, dealt over the four shard cases, which
// ctest runs as four entries), KILN_FUZZ_SEED the first seed (default 1);
// KILN_FUZZ_SEED=s KILN_FUZZ_ITERS=1 replays seed s.
//
// What it catches was checked by breaking the library on purpose, rebuilding and running the
// default models. In autograd/derivatives.cpp: a sign flipped in mul's derivative for its second
// operand, slice's backward padding at offset 0 instead of the slice's start, and pad's backward
// cropping the wrong side each failed a third of the models or more, by the directional check
// (the f64 reference shares the rules). In the compiled path only: graph/slice_gradients.cpp's
// pads_to_cat joining the pieces in reverse order failed about one model in ten, by the
// compiled comparison.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdlib>

#include <fmt/ranges.h>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "jit/compile.h"
#include "support/fuzz_model.h"

using namespace kiln;
using namespace kiln::test;

namespace {

std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::strtoull(v, nullptr, 10) : fallback;
}

// What a compiled tensor may differ from f64 by: relative * max(||want||, floor * scale), scale
// the norm of all the model's f64 gradients together. f32: compiled and f64 differ by f32
// rounding, ~1e-7 per op and a few e-6 through a dozen layers (norms and softmax amplify it a
// little); 1e-4 leaves margin, and a wrong rule moves a gradient by tens of percent. A peaked
// softmax's q and k gradients are small differences of large terms, whose f32 rounding is a few
// e-6 of the model's gradient norm (in eager primitives too): floor 0.1, so 1e-5 of it. bf16:
// autocast rounds matmul inputs and outputs to 8 bits (4e-3 each), which a norm of few
// features or a residual stream grown large amplifies: up to 0.19 relative in 3,000 models
// (on one checked, the compiled gradient matched the CPU's eager bf16 autocast to 3e-7: bf16's,
// not kiln's); and a gradient that sums signed terms much larger than itself (a softmax's q and
// k, a saturated tanh's weight) carries their bf16 error, seen up to 1.4e-3 of the model's
// gradient norm: relative 0.25, floor 0.05 (1.25e-2 of the model's norm). A wrong rule or index
// moves a gradient by O(1) of itself (the mutations named at the top failed at 1.1 to 4).
struct Tolerance {
  double relative;
  double floor;
};
Tolerance tolerance(const Model& m) {
  return m.autocast ? Tolerance{0.25, 5e-2} : Tolerance{1e-4, 0.1};
}

double norm(const Tensor& t) {
  Tensor d = t.to(Device::cpu()).to(DType::f64);
  return std::sqrt(sum(d * d).item());
}

// The largest relative error seen per path (f32, bf16) and of the directional derivatives
// (relative to ||gradient||), reported per shard: the margin left.
double largest_error[3] = {0, 0, 0};

// Empty when `got` is within `tol` of `want` in norm. A reference below 1e-10 of `scale` is zero
// but for f64 rounding (an unused parameter; q and k where every query attends one key), and then
// `got` must be below tol.relative of `scale`, since f32 or bf16 rounding leaves such a gradient
// small, not zero.
std::string compare(const std::string& what, const Tensor& got, const Tensor& want, Tolerance tol,
                    double scale, double* largest = nullptr) {
  if (!want.defined() && !got.defined()) return "";
  const Tensor& present = got.defined() ? got : want;
  double ref = want.defined() ? norm(want) : 0.0;
  double err = got.defined() && want.defined() ? -1.0 : norm(present);
  if (err < 0) {
    if (got.shape() != want.shape())
      return fmt::format("{}: shape {} compiled, {} in f64", what, shape_str(got.shape()),
                         shape_str(want.shape()));
    err = norm(got.to(Device::cpu()).to(DType::f64) - want);
  }
  bool zero = ref <= 1e-10 * scale;
  double bound = tol.relative * (zero ? scale : std::max(ref, tol.floor * scale));
  if (largest && !zero) *largest = std::max(*largest, err / std::max(ref, tol.floor * scale));
  if (std::isfinite(err) && err <= bound) return "";
  if (zero)
    return fmt::format(
        "{}: zero in f64 (norm {:.3g}), compiled norm {:.3g} (tolerance {} of {:.3g})", what, ref,
        err, tol.relative, scale);
  return fmt::format(
      "{}: ||got - want|| = {:.3g}, ||want|| = {:.3g} (relative {:.3g}, bound {:.3g}; all "
      "gradients {:.3g})",
      what, err, ref, err / ref, bound, scale);
}

// The parameters of one model, registered as a module's slots so the compiled function reads
// them on every call and gives them gradients.
class FuzzParameters : public nn::Module {
 public:
  FuzzParameters(const std::vector<ParameterShape>& shapes, const std::vector<Tensor>& values)
      : tensors(values.size()) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      tensors[i] = values[i];
      register_parameter(shapes[i].name, tensors[i]);
    }
  }
  std::vector<Tensor> tensors;
};

// A model's starting values: weights ~ N(0, 1/in) (so activations stay O(1) through the
// layers), vectors (biases, norm weights) 1 + N(0, 1/4), tables N(0, 1).
struct Draw {
  std::vector<Tensor> params;
  ModelData data;
  Tensor loss_weights;  // R [batch, seq, dim]
};

Draw draw(const Model& m, std::uint64_t seed) {
  Generator gen(seed);
  Draw d;
  for (const auto& p : model_parameter_shapes(m)) {
    Tensor t = randn(p.shape, DType::f32, &gen);
    if (p.shape.size() == 1)
      t = t * 0.5 + 1.0;
    else if (p.name.find("table") == std::string::npos)
      t = t * (1.0 / std::sqrt(static_cast<double>(p.shape[1])));
    d.params.push_back(t);
  }
  d.data.x = randn({m.batch, m.seq, m.dim}, DType::f32, &gen);
  d.data.ids = randint(0, m.vocab, {m.batch, m.seq}, DType::i64, &gen);
  d.data.index = randint(0, m.dim, {m.batch, m.seq, m.dim}, DType::i64, &gen);
  Tensor eye_mask = eye(m.seq, -1, DType::bool_);
  d.data.keep = logical_or(gt(rand({m.seq, m.seq}, DType::f32, &gen), 0.5), eye_mask);
  d.data.causal_keep = tril(ones({m.seq, m.seq}, DType::bool_));
  d.data.additive = randn({m.seq, m.seq}, DType::f32, &gen);
  d.loss_weights = randn({m.batch, m.seq, m.dim}, DType::f32, &gen);
  return d;
}

ModelData on(const ModelData& d, Device device, DType floating) {
  return {d.x.to(device).to(floating), d.ids.to(device),
          d.index.to(device),          d.keep.to(device),
          d.causal_keep.to(device),    d.additive.to(device).to(floating)};
}

struct Result {
  Tensor out, loss;
  std::vector<Tensor> grads;  // the parameters', then x's
};

// The f64 loss with every parameter and x moved by `step` times `direction` (one tensor each).
double loss_at(const Model& m, const std::vector<Tensor>& params, const ModelData& data,
               const Tensor& weights, const std::vector<Tensor>& direction, double step) {
  NoGradGuard no_grad;
  std::vector<Tensor> moved;
  for (std::size_t i = 0; i < params.size(); ++i) moved.push_back(params[i] + direction[i] * step);
  ModelData at = data;
  at.x = data.x + direction.back() * step;
  return sum(run_model(m, moved, at) * weights).item();
}

// Empty when the f64 gradient's derivative along two random unit directions matches central
// differences of the loss. The reference's gradient comes from the same derivative rules the
// compiled backward is traced from, so this is what catches a wrong rule. In f64 with step 1e-5
// the difference quotient is good to ~1e-9 (truncation ~step^2, rounding ~1e-16 / step), while a
// rule wrong by a fraction f of a gradient moves the directional derivative by about
// f * ||g|| / sqrt(elements), 1e-3 * ||g|| and more here. A step that crosses a kink (relu at 0)
// is tried again 8 times smaller before it counts as a failure.
std::string check_directional_derivatives(const Model& m, std::uint64_t seed,
                                          const std::vector<Tensor>& params, const ModelData& data,
                                          const Tensor& weights, const std::vector<Tensor>& grads) {
  Generator gen(seed ^ 0x9e3779b97f4a7c15ULL);
  double grad_norm = 0;
  for (const auto& g : grads)
    if (g.defined()) grad_norm += sum(g * g).item();
  grad_norm = std::sqrt(grad_norm);
  for (int trial = 0; trial < 2; ++trial) {
    std::vector<Tensor> direction;
    double length = 0;
    for (const auto& p : params) direction.push_back(randn(p.shape(), DType::f64, &gen));
    direction.push_back(randn(data.x.shape(), DType::f64, &gen));
    for (const auto& v : direction) length += sum(v * v).item();
    double along = 0;
    for (std::size_t i = 0; i < direction.size(); ++i) {
      direction[i] = direction[i] * (1 / std::sqrt(length));
      if (grads[i].defined()) along += sum(grads[i] * direction[i]).item();
    }
    double diff = INFINITY;
    for (double step : {1e-5, 1.25e-6}) {
      double quotient = (loss_at(m, params, data, weights, direction, step) -
                         loss_at(m, params, data, weights, direction, -step)) /
                        (2 * step);
      diff = std::abs(quotient - along);
      if (diff <= 1e-6 * grad_norm + 1e-9) break;
    }
    if (grad_norm > 0) largest_error[2] = std::max(largest_error[2], diff / grad_norm);
    if (!(diff <= 1e-6 * grad_norm + 1e-9))
      return fmt::format(
          "the f64 gradient along a random direction is {:.9g}, central differences of the loss "
          "give {:.9g} (||gradient|| {:.3g}): a derivative rule is wrong",
          along, along + diff, grad_norm);
  }
  return "";
}

// The model eagerly on the CPU in f64; `why` is set when its gradient fails the directional
// check.
Result reference(const Model& m, const Draw& d, std::uint64_t seed, std::string& why) {
  ModelData data = on(d.data, Device::cpu(), DType::f64);
  data.x.requires_grad_();
  std::vector<Tensor> params;
  for (const auto& p : d.params) params.push_back(p.to(DType::f64).requires_grad_());
  Tensor weights = d.loss_weights.to(DType::f64);
  Result r;
  r.out = run_model(m, params, data);
  r.loss = sum(r.out * weights);
  r.loss.backward();
  for (const auto& p : params) r.grads.push_back(p.grad());
  r.grads.push_back(data.x.grad());
  std::vector<Tensor> detached;
  for (const auto& p : params) detached.push_back(p.detach());
  ModelData plain = data;
  plain.x = data.x.detach();
  why = check_directional_derivatives(m, seed, detached, plain, weights, r.grads);
  return r;
}

// The model compiled for training on the CUDA device: one call, one backward. `why` is set when
// it did not run compiled for training.
Result compiled(const Model& m, const Draw& d, std::string& why) {
  ModelData data = on(d.data, Device::cuda(), DType::f32);
  data.x.requires_grad_();
  std::vector<Tensor> values;
  for (const auto& p : d.params) values.push_back(p.to(Device::cuda()));
  FuzzParameters module(model_parameter_shapes(m), values);
  Tensor r_weights = d.loss_weights.to(Device::cuda());
  jit::CompileOptions options;
  options.name = "fuzz_model";
  options.modules = {&module};
  auto f = jit::compile(
      [&](const Tensor& x) {
        ModelData traced = data;
        traced.x = x;
        Tensor out = run_model(m, module.tensors, traced);
        return std::make_pair(sum(out * r_weights), out);
      },
      options);
  Result r;
  {
    AutocastScope scope(DType::bf16, m.autocast);
    std::tie(r.loss, r.out) = f(data.x);
  }
  if (!f.core().aot(0)) {
    why = "the call was not compiled for training: " + f.explain();
    return r;
  }
  r.loss.backward();
  for (const auto& p : module.tensors) r.grads.push_back(p.grad());
  r.grads.push_back(data.x.grad());
  return r;
}

// Empty when the compiled model matches the f64 reference, else what differs.
std::string check_model(const Model& m, std::uint64_t seed) {
  Draw d = draw(m, seed);
  std::string why;
  Result want = reference(m, d, seed, why);
  if (!why.empty()) return why;
  Result got;
  try {
    got = compiled(m, d, why);
  } catch (const std::exception& e) {
    return fmt::format("compiled training failed: {}", e.what());
  }
  if (!why.empty()) return why;
  Tolerance tol = tolerance(m);
  double* largest = &largest_error[m.autocast ? 1 : 0];
  if (auto w = compare("output", got.out, want.out, tol, norm(want.out), largest); !w.empty())
    return w;
  // The loss is a sum of signed terms: bound its error by the sum of their sizes.
  double loss_err = std::abs(got.loss.to(Device::cpu()).to(DType::f64).item() - want.loss.item());
  double loss_scale = sum(abs(want.out * d.loss_weights.to(DType::f64))).item();
  if (!(loss_err <= tol.relative * loss_scale))
    return fmt::format("loss: {} compiled vs {} in f64", got.loss.to(DType::f64).item(),
                       want.loss.item());
  auto names = model_parameter_shapes(m);
  double scale = 0;
  for (const auto& g : want.grads)
    if (g.defined()) scale = std::hypot(scale, norm(g));
  std::string all;
  for (std::size_t i = 0; i < want.grads.size(); ++i) {
    std::string name = i < names.size() ? names[i].name + ".grad" : "x.grad";
    if (auto w = compare(name, got.grads[i], want.grads[i], tol, scale, largest); !w.empty())
      all += w + "\n";
  }
  return all;
}

// The shard cases below: ctest runs each as an entry, side by side.
constexpr std::uint64_t kShards = 4;

// Runs this shard's seeds: of `iters` models from `first`, every kShards-th from first + shard
// (dealt, so that the slow models spread over the shards). Every model runs; the first three
// failures are printed in full, the rest counted.
void run_shard(std::uint64_t shard) {
  std::uint64_t iters = env_number("KILN_FUZZ_ITERS", 300);
  std::uint64_t first = env_number("KILN_FUZZ_SEED", 1);
  std::uint64_t begin = first + shard, end = first + iters, models = 0;
  std::uint64_t failures = 0;
  std::vector<std::uint64_t> failed;
  for (std::uint64_t seed = begin; seed < end; seed += kShards) {
    ++models;
    Model m = random_model(seed);
    std::string why = check_model(m, seed);
    if (why.empty()) continue;
    if (++failures <= 3)
      BOOST_ERROR(fmt::format(
          "training fuzz seed {} (replay: KILN_FUZZ_SEED={} KILN_FUZZ_ITERS=1):\n{}\nmodel:\n{}",
          seed, seed, why, describe(m)));
    failed.push_back(seed);
  }
  BOOST_TEST_MESSAGE(
      fmt::format("fuzz training: {} models from seed {}, every {}th; largest relative error f32 "
                  "{:.3g}, bf16 {:.3g}, "
                  "directional derivative {:.3g}",
                  models, begin, kShards, largest_error[0], largest_error[1], largest_error[2]));
  BOOST_TEST(failures == 0, failures << " of " << models << " models failed, seeds "
                                     << fmt::format("{}", fmt::join(failed, " ")));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fuzz_training)

BOOST_AUTO_TEST_CASE(the_comparison_rejects_a_zero_or_sign_flipped_small_gradient) {
  // A gradient of 1/N entries, as a mean over N = 4096 elements gives: an absolute floor of
  // 1e-3 would pass both wrong ones; a bound relative to the norm passes neither.
  Generator gen(3);
  Tensor want = randn({64, 64}, DType::f64, &gen) * (1.0 / 4096);
  double scale = norm(want);
  BOOST_TEST(compare("g", want.to(DType::f32), want, Tolerance{1e-4, 0}, scale).empty());
  BOOST_TEST(!compare("g", zeros({64, 64}), want, Tolerance{1e-4, 0}, scale).empty());
  BOOST_TEST(!compare("g", -want, want, Tolerance{1e-4, 0}, scale).empty());
  BOOST_TEST(!compare("g", want * 1.01, want, Tolerance{1e-4, 0}, scale).empty());
  BOOST_TEST(!compare("g", Tensor(), want, Tolerance{1e-4, 0}, scale).empty());
  // A reference that is zero but for rounding takes a result that is small beside the model's
  // gradients (`scale`), not a large one.
  Tensor zero = zeros({4, 4}, DType::f64) + 1e-15;
  BOOST_TEST(compare("g", zeros({4, 4}), zero, Tolerance{1e-4, 0}, 1.0).empty());
  BOOST_TEST(compare("g", Tensor(), zero, Tolerance{1e-4, 0}, 1.0).empty());
  BOOST_TEST(compare("g", full({4, 4}, 1e-6), zero, Tolerance{1e-4, 0}, 1.0).empty());
  BOOST_TEST(!compare("g", full({4, 4}, 1e-3), zero, Tolerance{1e-4, 0}, 1.0).empty());
}

BOOST_AUTO_TEST_CASE(random_models_shard_0) {
  run_shard(0);
}

BOOST_AUTO_TEST_CASE(random_models_shard_1) {
  run_shard(1);
}

BOOST_AUTO_TEST_CASE(random_models_shard_2) {
  run_shard(2);
}

BOOST_AUTO_TEST_CASE(random_models_shard_3) {
  run_shard(3);
}

BOOST_AUTO_TEST_SUITE_END()
