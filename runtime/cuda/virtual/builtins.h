// The extern device functions NVRTC's output may call and the virtual GPU provides itself:
// vprintf (printf), __assertfail (assert), malloc and free.
#pragma once

#include "runtime/cuda/virtual/thread.h"

namespace kiln::cuda::vgpu {

// Runs builtin `callee` for call instruction `in`; throws PtxError-style faults for unknown ones.
void call_builtin(ThreadState& t, const Instr& in, const Function& callee, const CallSite& cs);

}  // namespace kiln::cuda::vgpu
