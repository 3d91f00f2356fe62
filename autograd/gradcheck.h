// Checks analytical gradients against central finite differences, in f64.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace kiln::autograd {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};

struct GradcheckResult {
  bool ok = true;
  std::string report;  // the first mismatch: input, element, output, both values
};

// `fn` maps the inputs to one tensor. Every floating input that requires grad is checked
// (it must be f64); the full Jacobian is compared element by element.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace kiln::autograd
