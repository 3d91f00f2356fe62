// Where eager ops meet autograd: run a primitive through the dispatch point and, when grad mode
// is on and an input requires grad, attach the node that knows its derivative.
#pragma once

#include <string>
#include <vector>

#include "autograd/node.h"

namespace kiln::autograd {

Tensor record(OpId op, std::vector<Tensor> inputs, const OpAttrs& attrs = {});

// Gives `output` (computed from `inputs` without history) a FunctionNode with a closed-form
// backward; `rule` returns one gradient per input (undefined where none).
Tensor record_function(Tensor output, std::string name, const std::vector<Tensor>& inputs,
                       FunctionNode::Backward rule);

bool any_requires_grad(const std::vector<Tensor>& inputs);

}  // namespace kiln::autograd
