// The gradients of a compiled two-argument loss on the CPU and CUDA against an eager reference.
#pragma once

#include <boost/test/unit_test.hpp>

#include "autograd/ops.h"
#include "jit/compile.h"
#include "support/device_compare.h"

namespace kiln::test {

// `compiled` differentiated on each device against `reference` differentiated eagerly on the
// CPU, at random x and w of the given shapes.
template <class Compiled, class Reference>
void check_compiled_gradients(Compiled compiled, Reference reference, const Shape& x_shape,
                              const Shape& w_shape) {
  Tensor x0 = randn(x_shape), w0 = randn(w_shape);
  Tensor xe = x0.clone().requires_grad_(), we = w0.clone().requires_grad_();
  reference(xe, we).backward();
  for (Device d : {Device::cpu(), Device::cuda()}) {
    Tensor x = x0.to(d).clone().requires_grad_(), w = w0.to(d).clone().requires_grad_();
    auto f = jit::compile(compiled);
    f(x, w).backward();
    BOOST_TEST(relative_error(x.grad().to(Device::cpu()), xe.grad()) < 1e-6, d.str());
    BOOST_TEST(relative_error(w.grad().to(Device::cpu()), we.grad()) < 1e-6, d.str());
  }
}

}  // namespace kiln::test
