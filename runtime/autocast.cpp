// Autocast state is per thread, as grad mode is: a scope on one thread leaves others in f32.
#include "runtime/autocast.h"

#include "runtime/error.h"

namespace kiln {

namespace {
thread_local AutocastState current_state;

void check_dtype(DType dtype) {
  KILN_CHECK_AS(
      DTypeError, dtype == DType::f16 || dtype == DType::bf16,
      "autocast: the dtype must be f16 or bf16 (a lower-precision floating dtype), got {}", dtype);
}
}  // namespace

AutocastState autocast_state() {
  return current_state;
}

void set_autocast_state(AutocastState state) {
  if (!state.enabled) {
    current_state = AutocastState{};
    return;
  }
  check_dtype(state.dtype);
  current_state = state;
}

const char* autocast_name(AutocastState state) {
  if (!state.enabled) return "disabled";
  return state.dtype == DType::f16 ? "f16" : "bf16";
}

AutocastScope::AutocastScope(AutocastState state) : previous_(current_state) {
  set_autocast_state(state);
}

AutocastScope::AutocastScope(DType dtype, bool enabled) : previous_(current_state) {
  check_dtype(dtype);
  set_autocast_state({enabled, dtype});
}

AutocastScope::~AutocastScope() {
  current_state = previous_;
}

}  // namespace kiln
