// KILN_LAUNCH_BLOCKING=1: every kernel launch waits for its kernel, so that a fault surfaces at
// the launch that caused it, naming the kernel, its grid and block, instead of at a later call
// that waits for the device (where CUDA reports it naming nothing). One switch and one wording
// for both backends: the driver waits with cuCtxSynchronize, the virtual GPU raises a fault its
// late mode would have held (virtual_backend.h).
#pragma once

#include <string>
#include <string_view>

#include "runtime/cuda/backend.h"

namespace kiln::cuda {

// KILN_LAUNCH_BLOCKING=1 when first asked (docs/environment.md), or what set_launch_blocking set.
bool launch_blocking();
// For tests: turns the switch on or off in this process; returns the previous setting.
bool set_launch_blocking(bool on);
// Whether `value` (KILN_LAUNCH_BLOCKING's text; null when unset) turns it on: "1" does, "0" and
// unset do not; anything else is a kiln::Error naming it.
bool launch_blocking_value(const char* value);

// "'k' grid (2,1,1) block (128,1,1) dynamic shared 0 bytes": a launch as errors name it.
std::string launch_text(std::string_view kernel, Dim3 grid, Dim3 block, unsigned dynamic_shared);

// The message of a launch whose wait (`sync_call`, e.g. cuCtxSynchronize) failed with `error`.
std::string blocking_launch_failure(std::string_view launch, std::string_view sync_call,
                                    std::string_view error);

}  // namespace kiln::cuda
