// torch._foreach_add_ for kiln: every tensor of a list updated in place by adding another. On a
// device with a multi-tensor implementation (CUDA: runtime/multi_tensor.h) the entries it can
// take are one generated launch per pair of dtypes; the rest, and every entry elsewhere (the
// CPU), take one add_ each. The autograd engine accumulates a backward's leaf gradients with it.
#pragma once

#include <span>

#include "runtime/tensor.h"

namespace kiln {

// selves[i] += others[i] for every i, others[i] converted to selves[i]'s dtype first; every
// addend is read as it was before the call, whatever it aliases. Error naming the entry when the
// lists differ in length or an entry's shapes or devices differ. An entry that needs history
// (grad mode on and a side requiring grad) is recorded as add_ records it.
void foreach_add_(std::span<const Tensor> selves, std::span<const Tensor> others);

}  // namespace kiln
