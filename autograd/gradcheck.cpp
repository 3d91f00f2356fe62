// Finite-difference gradient checking.
#include "autograd/gradcheck.h"

#include <cmath>

#include "autograd/engine.h"
#include "runtime/grad_mode.h"
#include "autograd/ops.h"

namespace kiln::autograd {

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  std::vector<std::size_t> checked;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    KILN_CHECK_AS(DTypeError, inputs[i].dtype() == DType::f64,
                  "gradcheck: input {} must be f64 for finite differences, got {}", i,
                  inputs[i].dtype());
    checked.push_back(i);
  }
  KILN_CHECK(!checked.empty(), "gradcheck: no input requires grad");

  // Analytical: one backward per output element gives one row of the Jacobian.
  Tensor out = fn(inputs);
  KILN_CHECK_AS(DTypeError, out.dtype() == DType::f64, "gradcheck: output must be f64, got {}",
                out.dtype());
  std::int64_t n_out = out.numel();
  std::vector<Tensor> wrt;
  for (auto i : checked) wrt.push_back(inputs[i]);
  // analytic[c][o][k]: d out[o] / d input c [k]
  std::vector<std::vector<std::vector<double>>> analytic(checked.size());
  for (std::int64_t o = 0; o < n_out; ++o) {
    std::vector<double> seed(n_out, 0.0);
    seed[o] = 1.0;
    auto grads = grad({out}, wrt, {from_vector(seed, out.shape())}, /*retain_graph=*/true);
    for (std::size_t c = 0; c < checked.size(); ++c)
      analytic[c].push_back(grads[c].to_vector<double>());
  }

  // Numerical: central differences on detached copies.
  NoGradGuard no_grad;
  std::vector<Tensor> probe;
  for (const auto& t : inputs) probe.push_back(t.defined() ? t.detach().clone() : t);
  for (std::size_t c = 0; c < checked.size(); ++c) {
    Tensor x = probe[checked[c]];
    double* data = x.data<double>();
    for (std::int64_t k = 0; k < x.numel(); ++k) {
      double saved = data[k];
      data[k] = saved + options.eps;
      auto plus = fn(probe).to_vector<double>();
      data[k] = saved - options.eps;
      auto minus = fn(probe).to_vector<double>();
      data[k] = saved;
      for (std::int64_t o = 0; o < n_out; ++o) {
        double numeric = (plus[o] - minus[o]) / (2 * options.eps);
        double a = analytic[c][o][k];
        if (!(std::abs(a - numeric) <= options.atol + options.rtol * std::abs(numeric))) {
          return {false, fmt::format("gradcheck: input {} element {} -> output element {}: "
                                     "analytical {:.10g}, numerical {:.10g}",
                                     checked[c], k, o, a, numeric)};
        }
      }
    }
  }
  return {};
}

}  // namespace kiln::autograd
