// Mixed-precision autocast state of this thread (PyTorch's torch.autocast): whether the ops
// autocast lists cast their floating inputs, and to which low dtype. Which op casts how is in
// autograd/autocast.h; a compiled function guards on this state (jit/guards.h).
#pragma once

#include "runtime/dtype.h"

namespace kiln {

struct AutocastState {
  bool enabled = false;
  DType dtype = DType::bf16;  // f16 or bf16; bf16 whenever disabled, so equal states compare equal

  bool operator==(const AutocastState&) const = default;
};

AutocastState autocast_state();
// Throws DTypeError naming autocast when `state` is enabled with a dtype other than f16 / bf16.
void set_autocast_state(AutocastState state);
// "bf16", "f16" or "disabled": how guards and logs name a state.
const char* autocast_name(AutocastState state);

// Sets the autocast state for its scope, restoring the previous one on exit; scopes nest, and
// an inner `enabled = false` scope turns autocast off inside an outer one. Applies to ops on every
// device: CPU kernels compute f16/bf16 in f32 and round once, as the generated kernels do.
class AutocastScope {
 public:
  explicit AutocastScope(AutocastState state);
  // Checks `dtype` even when disabling, so a wrong dtype is caught where it is written.
  AutocastScope(DType dtype, bool enabled);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  AutocastState previous_;
};

// `auto scope = autocast(DType::bf16);`: matmuls and linear layers run in `dtype` (f32
// accumulation), softmax, norms, losses and sums in f32, until `scope` ends. `enabled = false`
// disables autocast for the scope. An integer or f64 `dtype` is a DTypeError.
[[nodiscard]] inline AutocastScope autocast(DType dtype, bool enabled = true) {
  return AutocastScope(dtype, enabled);
}

}  // namespace kiln
