// Where eager ops meet autograd: run a primitive through the dispatch point and, when grad mode
// is on and an input requires grad, give its outputs the node that knows its derivative. While a
// function is traced, the tracer records the op and no history is made, unless the tracer asks
// for it (a joint forward + backward trace).
#pragma once

#include <vector>

#include "autograd/node.h"

namespace kiln::autograd {

// Every output of `op`.
std::vector<Tensor> record_outputs(OpId op, std::vector<Tensor> inputs, const OpAttrs& attrs = {});
// The output of a single-output op.
Tensor record(OpId op, std::vector<Tensor> inputs, const OpAttrs& attrs = {});

bool any_requires_grad(const std::vector<Tensor>& inputs);

}  // namespace kiln::autograd
