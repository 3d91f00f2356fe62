// One argument of a call to a traced function: a tensor or a scalar (guarded by value). Tensors
// are borrowed, not copied: a cache hit must not pay for reference counting. Here, not in jit/,
// because a graph's inputs are resolved against a call's arguments (node_values.h).
#pragma once

#include "runtime/tensor.h"

namespace kiln::graph {

struct CallArg {
  bool is_tensor = false;
  const Tensor* tensor = nullptr;  // the caller's tensor, alive for the whole call
  double scalar = 0.0;
};

}  // namespace kiln::graph
