// Leaves and history names for tests that compare autograd across devices and dtypes.
#pragma once

#include <string>

#include "autograd/node.h"
#include "runtime/tensor.h"

namespace kiln::test {

// A leaf on `device` in `dtype` holding `values`' values, requiring grad.
inline Tensor leaf(const Tensor& values, DType dtype, Device device) {
  return values.to(dtype).to(device).detach().requires_grad_();
}

// The name of `t`'s grad_fn, or "" for a tensor without history.
inline std::string grad_fn_name(const Tensor& t) {
  return t.grad_fn() ? t.grad_fn()->name() : "";
}

}  // namespace kiln::test
