// The reverse-mode engine: runs the backward graph from some roots in reverse creation order.
#pragma once

#include <vector>

#include "runtime/tensor.h"

namespace kiln::autograd {

// Backpropagates `grads` (one per root, same shapes) into the leaves' .grad. The graph is freed
// as it runs unless `retain_graph` or `create_graph` (whose gradient graph reuses it) is set.
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph, bool create_graph);

// Gradients of `outputs` with respect to `inputs` (returned, not accumulated into .grad). An
// input no gradient reaches gets zeros, or with `materialize_unused` false an undefined tensor
// (PyTorch's allow_unused).
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool create_graph = false, bool materialize_unused = true);

}  // namespace kiln::autograd
