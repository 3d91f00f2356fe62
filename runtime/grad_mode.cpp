// Grad mode is per thread, as in PyTorch: a NoGradGuard on one thread leaves others recording.
#include "runtime/grad_mode.h"

namespace kiln {

namespace {
thread_local bool grad_mode_enabled = true;
}

bool grad_enabled() { return grad_mode_enabled; }
void set_grad_enabled(bool enabled) { grad_mode_enabled = enabled; }

}  // namespace kiln
