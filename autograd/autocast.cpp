// Casting an op's inputs for autocast (the policies are listed in autograd/autocast.h).
#include "autograd/autocast.h"

#include "autograd/ops.h"

namespace kiln::autograd {

namespace {

// PyTorch's is_eligible: floating, and not f64 (double precision is asked for on purpose).
bool eligible(const Tensor& x) {
  if (!x.defined()) return false;
  DType t = x.dtype();
  return t == DType::f32 || t == DType::f16 || t == DType::bf16;
}

}  // namespace

Tensor autocast_input(AutocastPolicy policy, const Tensor& x) {
  AutocastState state = autocast_state();
  if (!state.enabled || !eligible(x)) return x;
  switch (policy) {
    case AutocastPolicy::keep:
      return x;
    case AutocastPolicy::lower_precision:
      return cast(x, state.dtype);
    case AutocastPolicy::f32:
      return cast(x, DType::f32);
    case AutocastPolicy::promote:
      return x;  // alone, it is its own widest type
  }
  return x;
}

std::vector<Tensor> autocast_inputs(AutocastPolicy policy, std::vector<Tensor> inputs) {
  if (!autocast_state().enabled || policy == AutocastPolicy::keep) return inputs;
  if (policy != AutocastPolicy::promote) {
    for (auto& t : inputs) t = autocast_input(policy, t);
    return inputs;
  }
  bool any = false;
  DType widest = DType::f16;
  for (const auto& t : inputs) {
    if (!eligible(t)) continue;
    widest = any ? promote_types(widest, t.dtype()) : t.dtype();
    any = true;
  }
  for (auto& t : inputs)
    if (eligible(t)) t = cast(t, widest);
  return inputs;
}

}  // namespace kiln::autograd
