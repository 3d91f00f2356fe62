// One argument of a compiled function's call: a tensor or a scalar (guarded by value).
#pragma once

#include "runtime/tensor.h"

namespace kiln::jit {

struct CallArg {
  bool is_tensor = false;
  Tensor tensor;
  double scalar = 0.0;
};

}  // namespace kiln::jit
