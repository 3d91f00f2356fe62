// Extras of the virtual GPU beyond the Backend interface, for tests and benchmarks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/cuda/backend.h"

namespace kiln::cuda::vgpu {

// Thread-instructions executed by all launches of `backend` so far; throws kiln::Error if
// `backend` is not the virtual GPU.
std::uint64_t executed_thread_instructions(Backend& backend);

// Throws kiln::Error "<what>: <why>" unless [ptr, ptr + bytes) lies in one live allocation of
// the virtual GPU `backend`: library calls check their operands as kernel accesses are checked.
void check_device_range(Backend& backend, DevicePtr ptr, std::uint64_t bytes, const char* what);
// Library calls served on the host (cuBLASLt) mark what they write for initcheck.
void mark_device_initialized(Backend& backend, DevicePtr ptr, std::uint64_t bytes);

// While off, launches are checked (handle, dims, shared memory) and counted but their kernels do
// not run: a benchmark measures the host's cost of a call without the interpreter's (a real
// GPU's launch returns once the kernel is queued). Nothing they write is written. Returns the
// previous setting; on by default.
bool set_kernel_execution(bool on);

// Makes the virtual GPU `backend` report compute capability major.minor, with that
// architecture's shared memory limits (shared_memory_limits.h); sm_90 by default. For tests.
void set_compute_capability(Backend& backend, int major, int minor);
// Makes the virtual GPU `backend` report `bytes` (at least the 48 KiB default) as the most shared
// memory a block may have once its function opts in: a device that allows no more than the
// default, say, which no architecture NVRTC targets has. set_compute_capability restores its
// architecture's. For tests.
void set_shared_memory_optin_limit(Backend& backend, std::size_t bytes);

// While on, events recorded stay unfinished (event_done false) until a synchronization (event,
// stream or device) that covers them, as on a GPU still busy: tests of code that must not reuse
// a buffer before its copy's event completes. Returns the previous setting; off by default.
bool hold_events(bool on);

}  // namespace kiln::cuda::vgpu
