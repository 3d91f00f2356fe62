// Autocast (runtime/autocast.h, autograd/autocast.h): the dtype each op class produces under
// autocast against PyTorch's CUDA op lists (hand-written expectations), matmul values against a
// host reference with f32 accumulation, an MLP and the GPT demo's model forward + backward under
// bf16 against the f32 CPU reference, f32 gradients for f32 parameters, compiled vs eager,
// the guard that retraces when autocast toggles, and bad input.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "demos/gpt_model.h"
#include "jit/compile.h"
#include "runtime/log.h"
#include "support/capture_output.h"
#include "support/op_samples.h"
#include "support/reference.h"

using namespace kiln;

namespace {

constexpr DType kLowDTypes[] = {DType::bf16, DType::f16};

// ||a - b|| / ||b||: one figure per tensor, so a few values near zero do not dominate.
double relative_l2(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

std::vector<double> values(const Tensor& t) {
  return t.to(Device::cpu()).to_vector<double>();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(autocast_ops)

// PyTorch's CUDA lists: lower_precision_fp (matmul, bmm, linear, einsum), fp32 (exp, log, pow,
// softplus, layer_norm, losses, logsumexp), fp32_set_opt_dtype (softmax, log_softmax, sum,
// prod, cumsum), promote (scatter_add); mean and unlisted ops keep their input dtype.
BOOST_AUTO_TEST_CASE(each_op_class_produces_the_dtype_pytorchs_lists_give) {
  Generator gen(3);
  Tensor a = randn({4, 8}, DType::f32, &gen), b = randn({8, 5}, DType::f32, &gen);
  Tensor w = randn({5, 8}, DType::f32, &gen), bias = randn({5}, DType::f32, &gen);
  Tensor w2 = randn({3, 5}, DType::f32, &gen), b2 = randn({3}, DType::f32, &gen);
  Tensor pos = rand({4, 8}, DType::f32, &gen) + 0.5;
  Tensor targets = from_vector<std::int64_t>({0, 3, 1, 2}, {4});
  for (DType low : kLowDTypes) {
    BOOST_TEST_CONTEXT("autocast " << dtype_name(low)) {
      auto scope = autocast(low);
      Tensor h = a.to(low), hp = pos.to(low);  // inputs already in the low dtype
      // lower precision, from f32 inputs
      BOOST_TEST(matmul(a, b).dtype() == low);
      BOOST_TEST(matmul(a.reshape({32}), a.reshape({32})).dtype() == low);
      BOOST_TEST(bmm(a.reshape({2, 2, 8}), randn({2, 8, 5}, DType::f32, &gen)).dtype() == low);
      BOOST_TEST(linear(a, w, bias).dtype() == low);
      BOOST_TEST(linear(a, w, bias, Activation::gelu_tanh).dtype() == low);
      BOOST_TEST(feed_forward(a, w, bias, w2, b2).dtype() == low);
      BOOST_TEST(einsum("ij,jk->ik", {a, b}).dtype() == low);
      // f32, from low-precision inputs
      for (auto* f :
           {&kiln::exp, &kiln::log, &kiln::log1p, &kiln::expm1, &kiln::reciprocal, &kiln::rsqrt})
        BOOST_TEST(f(hp).dtype() == DType::f32);
      BOOST_TEST(pow(hp, 2.0).dtype() == DType::f32);
      BOOST_TEST(pow(hp, hp).dtype() == DType::f32);
      BOOST_TEST(softplus(h).dtype() == DType::f32);
      BOOST_TEST(softmax(h, 1).dtype() == DType::f32);
      BOOST_TEST(log_softmax(h, 1).dtype() == DType::f32);
      BOOST_TEST(sum(h).dtype() == DType::f32);
      BOOST_TEST(sum(h, {1}).dtype() == DType::f32);
      BOOST_TEST(prod(h, {1}).dtype() == DType::f32);
      BOOST_TEST(cumsum(h, 1).dtype() == DType::f32);
      BOOST_TEST(logsumexp(h, {1}).dtype() == DType::f32);
      BOOST_TEST(layer_norm(h, {8}).dtype() == DType::f32);
      BOOST_TEST(rms_norm(h, {8}, ones({8}).to(low)).dtype() == DType::f32);
      BOOST_TEST(cross_entropy(h, targets).dtype() == DType::f32);
      BOOST_TEST(mse_loss(h, hp).dtype() == DType::f32);
      // promote: the widest input
      Tensor index = from_vector<std::int64_t>({0, 1, 2, 3}, {4, 1});
      BOOST_TEST(scatter_add(zeros({4, 8}), 1, index, h.slice(1, 0, 1)).dtype() == DType::f32);
      BOOST_TEST(scatter_add(zeros({4, 8}).to(low), 1, index, h.slice(1, 0, 1)).dtype() == low);
      BOOST_TEST(cat({h, a}, 0).dtype() == DType::f32);
      BOOST_TEST(where(gt(a, 0), h, a).dtype() == DType::f32);
      BOOST_TEST(add(h, a).dtype() == DType::f32);
      // not listed: the input's dtype, whichever it is
      BOOST_TEST(mean(h).dtype() == low);
      BOOST_TEST(var(h, {1}).dtype() == low);
      BOOST_TEST(relu(h).dtype() == low);
      BOOST_TEST(gelu(a).dtype() == DType::f32);
      BOOST_TEST(tanh(h).dtype() == low);
      BOOST_TEST((h * h).dtype() == low);
      // f64 and integers are never cast
      BOOST_TEST(matmul(a.to(DType::f64), b.to(DType::f64)).dtype() == DType::f64);
      BOOST_TEST(softmax(a.to(DType::f64), 1).dtype() == DType::f64);
      BOOST_TEST(sum(targets).dtype() == DType::i64);
    }
  }
  // Outside any scope nothing is cast.
  BOOST_TEST(matmul(a, b).dtype() == DType::f32);
  BOOST_TEST(softmax(a.to(DType::bf16), 1).dtype() == DType::bf16);
}

// The op table's autocast column (runtime/ops.def) for a few primitives, against PyTorch's CUDA
// lists (aten/src/ATen/autocast_mode.cpp): lower_precision_fp, fp32, fp32_set_opt_dtype (f32
// here), promote; ops on no list run in their inputs' dtypes. Composites (layer_norm, losses)
// are checked by their dtypes above.
BOOST_AUTO_TEST_CASE(the_autocast_column_follows_pytorchs_cuda_lists) {
  using enum AutocastPolicy;
  const std::pair<OpId, AutocastPolicy> lists[] = {
      // lower_precision_fp (also mm, bmm, linear)
      {OpId::matmul, lower_precision},
      // fp32
      {OpId::exp, f32},
      {OpId::log, f32},
      {OpId::log1p, f32},
      {OpId::expm1, f32},
      {OpId::reciprocal, f32},
      {OpId::rsqrt, f32},
      {OpId::pow, f32},
      {OpId::softplus, f32},
      // fp32_set_opt_dtype
      {OpId::softmax, f32},
      {OpId::log_softmax, f32},
      {OpId::sum, f32},
      {OpId::prod, f32},
      {OpId::cumsum, f32},
      // promote
      {OpId::scatter_add, promote},
      // on no list
      {OpId::add, keep},
      {OpId::mul, keep},
      {OpId::relu, keep},
      {OpId::gelu, keep},
      {OpId::tanh, keep},
      {OpId::sqrt, keep},
      {OpId::amax, keep},
      {OpId::where, keep},
      {OpId::cat, keep},
  };
  for (auto [op, policy] : lists)
    BOOST_TEST(static_cast<int>(op_def(op).autocast) == static_cast<int>(policy), op_name(op));
}

// The op API applies each op's column: under bf16 autocast, an op's samples give the dtypes the
// same op gives without autocast on the inputs its policy casts to (bf16 from f32 inputs for
// lower precision, f32 from bf16 inputs for f32, the inputs' own otherwise).
BOOST_AUTO_TEST_CASE(every_op_of_the_table_casts_as_its_autocast_column_says) {
  auto as = [](const std::vector<Tensor>& inputs, DType t) {
    std::vector<Tensor> out;
    for (const auto& x : inputs) out.push_back(is_floating(x.dtype()) ? x.to(t) : x);
    return out;
  };
  auto dtypes = [](const test::OpSample& s, const std::vector<Tensor>& inputs, bool autocasting) {
    AutocastScope scope(DType::bf16, autocasting);
    std::string out;
    for (const auto& t : s.run(inputs)) out += std::string(dtype_name(t.dtype())) + " ";
    return out;
  };
  int compared = 0;
  for (OpId op : all_ops()) {
    AutocastPolicy policy = op_def(op).autocast;
    DType given = policy == AutocastPolicy::lower_precision ? DType::f32 : DType::bf16;
    DType cast_to = policy == AutocastPolicy::lower_precision ? DType::bf16
                    : policy == AutocastPolicy::f32           ? DType::f32
                                                              : given;
    for (const auto& s : test::op_samples(op, DType::f64)) {
      BOOST_TEST_CONTEXT(s.label) {
        std::string want;
        try {
          want = dtypes(s, as(s.inputs, cast_to), false);
        } catch (const Error&) {
          continue;  // the op takes no inputs of that dtype
        }
        BOOST_TEST(dtypes(s, as(s.inputs, given), true) == want);
        ++compared;
      }
    }
  }
  BOOST_TEST(compared > 100);
}

BOOST_AUTO_TEST_CASE(scopes_nest_and_an_inner_disabled_scope_turns_autocast_off) {
  Tensor a = ones({2, 3}), b = ones({3, 2});
  BOOST_TEST(!autocast_state().enabled);
  {
    auto outer = autocast(DType::bf16);
    BOOST_TEST(matmul(a, b).dtype() == DType::bf16);
    {
      auto inner = autocast(DType::f16);
      BOOST_TEST(matmul(a, b).dtype() == DType::f16);
      {
        auto off = autocast(DType::bf16, /*enabled=*/false);
        BOOST_TEST(matmul(a, b).dtype() == DType::f32);
        BOOST_TEST(softmax(a.to(DType::f16), 1).dtype() == DType::f16);
      }
      BOOST_TEST(matmul(a, b).dtype() == DType::f16);
    }
    BOOST_TEST(matmul(a, b).dtype() == DType::bf16);
  }
  BOOST_TEST(matmul(a, b).dtype() == DType::f32);
  BOOST_TEST(!autocast_state().enabled);
}

// Inputs rounded to the low dtype, products summed exactly (f64 on the host), rounded once: what
// f32 accumulation gives for these sizes. 4096 ones expose a low-precision accumulator, which
// stalls at 256 (bf16) or 2048 (f16).
BOOST_AUTO_TEST_CASE(matmuls_round_the_inputs_and_accumulate_in_f32_on_cpu_and_cuda) {
  Generator gen(11);
  Tensor a = randn({6, 40}, DType::f32, &gen), b = randn({40, 7}, DType::f32, &gen);
  auto va = values(a), vb = values(b);
  for (DType low : kLowDTypes) {
    std::vector<double> expected(6 * 7);
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 7; ++j) {
        double s = 0;
        for (int k = 0; k < 40; ++k)
          s += test::round_to(low, va[i * 40 + k]) * test::round_to(low, vb[k * 7 + j]);
        expected[i * 7 + j] = s;
      }
    for (Device device : {Device::cpu(), Device::cuda()}) {
      BOOST_TEST_CONTEXT(dtype_name(low) << " on " << device.str()) {
        auto scope = autocast(low);
        Tensor out = matmul(a.to(device), b.to(device));
        BOOST_TEST(out.dtype() == low);
        auto got = values(out);
        for (std::size_t i = 0; i < got.size(); ++i)  // one rounding of the exact sum
          BOOST_TEST(std::fabs(got[i] - expected[i]) <=
                         std::fabs(expected[i]) * (low == DType::bf16 ? 0x1p-8 : 0x1p-11) + 1e-6,
                     "element " << i << ": " << got[i] << " vs " << expected[i]);
        Tensor many =
            matmul(ones({1, 4096}, DType::f32).to(device), ones({4096, 1}, DType::f32).to(device));
        BOOST_TEST(values(many)[0] == 4096.0);
        Tensor dense =
            linear(ones({2, 4096}).to(device), ones({3, 4096}).to(device), ones({3}).to(device));
        BOOST_TEST(values(dense) == std::vector<double>(6, 4096.0),
                   boost::test_tools::per_element());
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(autocast_training)

namespace {

struct Mlp {
  Tensor w1, b1, w2, b2;
  explicit Mlp(Device device) {
    Generator gen(5);
    w1 = (randn({32, 16}, DType::f32, &gen) * 0.25).to(device).requires_grad_();
    b1 = (randn({32}, DType::f32, &gen) * 0.1).to(device).requires_grad_();
    w2 = (randn({4, 32}, DType::f32, &gen) * 0.2).to(device).requires_grad_();
    b2 = (randn({4}, DType::f32, &gen) * 0.1).to(device).requires_grad_();
  }
  std::vector<Tensor> params() const { return {w1, b1, w2, b2}; }
};

Tensor mlp_loss(const Mlp& m, const Tensor& x, const Tensor& target) {
  Tensor h = linear(x, m.w1, m.b1, Activation::gelu_tanh);
  Tensor logits = linear(layer_norm(h, {32}), m.w2, m.b2);
  return cross_entropy(logits, target) + mse_loss(softmax(logits, 1), zeros({8, 4}).to(x.device()));
}

struct LossGrads {
  double loss = 0;
  DType loss_dtype = DType::f32;
  std::vector<std::vector<double>> grads;
  std::vector<DType> grad_dtypes;
};

LossGrads collect(const Tensor& loss, const std::vector<Tensor>& params) {
  LossGrads r;
  r.loss = loss.item();
  r.loss_dtype = loss.dtype();
  for (const auto& p : params) {
    r.grads.push_back(values(p.grad()));
    r.grad_dtypes.push_back(p.grad().dtype());
  }
  return r;
}

// The MLP's loss and gradients on `device`, under `low` autocast (nullopt: plain f32), the
// backward outside the scope unless `backward_inside`.
LossGrads mlp_step(Device device, std::optional<DType> low, bool backward_inside = false) {
  Mlp m(device);
  Generator gen(6);
  Tensor x = randn({8, 16}, DType::f32, &gen).to(device);
  Tensor target = from_vector<std::int64_t>({0, 1, 2, 3, 3, 2, 1, 0}, {8}).to(device);
  Tensor loss;
  {
    AutocastScope scope(low.value_or(DType::bf16), low.has_value());
    loss = mlp_loss(m, x, target);
    if (backward_inside) loss.backward();
  }
  if (!backward_inside) loss.backward();
  return collect(loss, m.params());
}

// bf16 keeps 8 significant bits (relative rounding 2^-9); through two layers, a norm and a loss
// the gradients of this size drift by a few of those. 3e-2 is ~15 roundings; a wrong cast (an
// f16 weight read as bf16, a dropped gradient) is off by O(1).
double tolerance(DType low) {
  return low == DType::bf16 ? 3e-2 : 5e-3;
}

void check_close(const LossGrads& got, const LossGrads& ref, DType low) {
  BOOST_TEST(got.loss_dtype == DType::f32);  // the loss is computed in f32
  BOOST_TEST_MESSAGE(dtype_name(low) << " loss " << got.loss << ", f32 " << ref.loss);
  BOOST_TEST(std::fabs(got.loss - ref.loss) <= tolerance(low) * std::fabs(ref.loss),
             "loss " << got.loss << " vs f32 " << ref.loss);
  BOOST_TEST_REQUIRE(got.grads.size() == ref.grads.size());
  for (std::size_t i = 0; i < got.grads.size(); ++i) {
    BOOST_TEST(got.grad_dtypes[i] == DType::f32, "gradient " << i << " of an f32 parameter");
    double err = relative_l2(got.grads[i], ref.grads[i]);
    BOOST_TEST_MESSAGE(dtype_name(low) << " gradient " << i << ": relative error " << err);
    BOOST_TEST(err <= tolerance(low), "gradient " << i << ": relative error " << err);
    BOOST_TEST(err > 0.0, "gradient " << i << " is bit-identical to f32: nothing was cast");
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_mlp_under_autocast_tracks_the_f32_cpu_reference_with_f32_gradients) {
  LossGrads ref = mlp_step(Device::cpu(), std::nullopt);
  for (DType low : kLowDTypes)
    for (Device device : {Device::cpu(), Device::cuda()})
      BOOST_TEST_CONTEXT(dtype_name(low) << " on " << device.str()) {
        check_close(mlp_step(device, low), ref, low);
      }
}

BOOST_AUTO_TEST_CASE(a_backward_inside_the_scope_follows_the_forward_dtypes) {
  // The engine turns autocast off: the same gradients as a backward outside the scope.
  for (Device device : {Device::cpu(), Device::cuda()}) {
    LossGrads outside = mlp_step(device, DType::bf16);
    LossGrads inside = mlp_step(device, DType::bf16, true);
    for (std::size_t i = 0; i < outside.grads.size(); ++i)
      BOOST_TEST(inside.grads[i] == outside.grads[i], boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(the_gpt_model_under_bf16_tracks_the_f32_cpu_reference) {
  gpt::GptConfig config;  // the demo's model, one block
  config.layers = 1;
  auto step = [&](Device device, std::optional<DType> low) {
    gpt::Gpt model(config, 1, device);
    Generator data(2);
    gpt::TaskBatch batch = gpt::make_batch(config, 8, config.seq_len, data, device);
    Tensor loss;
    {
      AutocastScope scope(low.value_or(DType::bf16), low.has_value());
      loss = model.loss(batch.tokens, batch.targets);
    }
    loss.backward();
    return collect(loss, model.parameters());
  };
  LossGrads ref = step(Device::cpu(), std::nullopt);
  for (Device device : {Device::cpu(), Device::cuda()})
    BOOST_TEST_CONTEXT("bf16 on " << device.str()) {
      check_close(step(device, DType::bf16), ref, DType::bf16);
    }
}

BOOST_AUTO_TEST_CASE(compiled_and_eager_agree_under_autocast) {
  for (Device device : {Device::cpu(), Device::cuda()}) {
    BOOST_TEST_CONTEXT(device.str()) {
      LossGrads eager = mlp_step(device, DType::bf16);
      Mlp m(device);
      Generator gen(6);
      Tensor x = randn({8, 16}, DType::f32, &gen).to(device);
      Tensor target = from_vector<std::int64_t>({0, 1, 2, 3, 3, 2, 1, 0}, {8}).to(device);
      jit::CompileOptions options;
      options.name = "mlp_loss";
      auto f = jit::compile([&m](const Tensor& x, const Tensor& t) { return mlp_loss(m, x, t); },
                            options);
      Tensor loss;
      {
        auto scope = autocast(DType::bf16);
        loss = f(x, target);
      }
      loss.backward();
      LossGrads compiled = collect(loss, m.params());
      BOOST_TEST(compiled.loss_dtype == DType::f32);
      // Fused kernels may keep a value in f32 that node-by-node rounds to bf16 in between.
      BOOST_TEST(std::fabs(compiled.loss - eager.loss) <= 1e-2 * std::fabs(eager.loss),
                 compiled.loss << " vs eager " << eager.loss);
      for (std::size_t i = 0; i < eager.grads.size(); ++i) {
        BOOST_TEST(compiled.grad_dtypes[i] == DType::f32);
        double err = relative_l2(compiled.grads[i], eager.grads[i]);
        BOOST_TEST_MESSAGE("compiled vs eager gradient " << i << ": relative error " << err);
        BOOST_TEST(err <= tolerance(DType::bf16), "gradient " << i << ": relative error " << err);
      }
      // The trace holds the casts to bf16 as nodes.
      int casts = 0;
      for (const auto& n : f.core().graph(0).nodes)
        casts += n.op == OpId::cast && n.attrs.dtype == DType::bf16;
      BOOST_TEST(casts >= 5);  // x, both weights, both biases
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(autocast_guards)

BOOST_AUTO_TEST_CASE(toggling_autocast_retraces_with_the_reason_and_never_reuses_the_f32_trace) {
  setenv("KILN_LOG", "recompiles", 1);
  reload_log_settings();
  jit::CompileOptions options;
  options.name = "mm";
  options.arg_names = {"a", "b"};
  auto f = jit::compile([](const Tensor& a, const Tensor& b) { return matmul(a, b); }, options);
  Tensor a = full({2, 3}, 0.1), b = full({3, 2}, 1.0);
  std::vector<DType> dtypes;
  std::string err = test::capture_output(2, [&] {
    dtypes.push_back(f(a, b).dtype());
    {
      auto scope = autocast(DType::bf16);
      dtypes.push_back(f(a, b).dtype());
      {
        auto inner = autocast(DType::f16);
        dtypes.push_back(f(a, b).dtype());
      }
      auto off = autocast(DType::bf16, false);
      dtypes.push_back(f(a, b).dtype());  // entry 0 again
    }
    dtypes.push_back(f(a, b).dtype());
  });
  unsetenv("KILN_LOG");
  reload_log_settings();
  std::vector<DType> expected = {DType::f32, DType::bf16, DType::f16, DType::f32, DType::f32};
  BOOST_TEST(dtypes == expected, boost::test_tools::per_element());
  BOOST_TEST(f.core().num_entries() == 3u);
  auto reasons = f.core().recompile_reasons();
  std::vector<std::string> expected_reasons = {"autocast mismatch: expected disabled, actual bf16",
                                               "autocast mismatch: expected bf16, actual f16"};
  BOOST_TEST(reasons == expected_reasons, boost::test_tools::per_element());
  BOOST_TEST(err.find("kiln: recompiling 'mm' (entry 1): autocast mismatch: expected disabled, "
                      "actual bf16") != std::string::npos,
             err);
  // The values: 0.1 rounded to bf16 before the product (0.10009765625), the sum 0.30029296875
  // rounded once to bf16, not the f32 result 0.3.
  BOOST_TEST(values(f(a, b))[0] == static_cast<double>(0.3f));
  auto scope = autocast(DType::bf16);
  BOOST_TEST(values(f(a, b))[0] == 0.30078125);
  BOOST_TEST(f.core().guards(1).str().find("autocast: bf16") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(autocast_errors)

BOOST_AUTO_TEST_CASE(integer_f64_and_f32_targets_are_errors_naming_autocast_and_the_dtype) {
  for (DType bad : {DType::i64, DType::i32, DType::bool_, DType::f64, DType::f32}) {
    BOOST_TEST_CONTEXT(dtype_name(bad)) {
      KILN_CHECK_THROWS(AutocastScope(bad, true), DTypeError, "autocast",
                        std::string(dtype_name(bad)));
      KILN_CHECK_THROWS(AutocastScope(bad, false), DTypeError, "autocast");
      KILN_CHECK_THROWS(set_autocast_state({true, bad}), DTypeError, "autocast");
      BOOST_TEST(!autocast_state().enabled);  // a failed scope changes nothing
    }
  }
  auto scope = autocast(DType::f16);
  KILN_CHECK_THROWS(AutocastScope(DType::i64, true), DTypeError, "i64");
  BOOST_TEST((autocast_state() == AutocastState{true, DType::f16}));
}

BOOST_AUTO_TEST_SUITE_END()
