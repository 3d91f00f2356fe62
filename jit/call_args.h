// One argument of a compiled function's call: a tensor or a scalar (guarded by value). Tensors
// are borrowed, not copied: a cache hit must not pay for reference counting.
#pragma once

#include "runtime/tensor.h"

namespace kiln::jit {

struct CallArg {
  bool is_tensor = false;
  const Tensor* tensor = nullptr;  // the caller's tensor, alive for the whole call
  double scalar = 0.0;
};

}  // namespace kiln::jit
