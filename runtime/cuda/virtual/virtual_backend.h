// Extras of the virtual GPU beyond the Backend interface, for tests and benchmarks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "runtime/cuda/backend.h"

namespace kiln::cuda::vgpu {

// Thread-instructions executed by all launches of `backend` so far; throws kiln::Error if
// `backend` is not the virtual GPU.
std::uint64_t executed_thread_instructions(Backend& backend);

// Calls of `backend` that took the legacy (null) stream so far: launches, copies, memsets and
// stream or event calls. kiln queues its own work on its stream (current_stream.h), so a test
// can assert that a compiled call adds none. Throws kiln::Error if `backend` is not the virtual
// GPU.
std::uint64_t legacy_stream_calls(Backend& backend);

// Graphs `backend` launched so far (launch_graph). Throws kiln::Error if it is not the virtual GPU.
std::uint64_t graph_launches(Backend& backend);

// A library call the virtual GPU computes on the host (cuBLASLt's contract), queued on `stream`:
// it runs now, or where `stream` captures it becomes a node of the graph, run at each replay.
void run_host_work(Backend& backend, Stream stream, std::function<void()> work);

// Throws kiln::Error "<what>: <why>" unless [ptr, ptr + bytes) lies in one live allocation of
// the virtual GPU `backend`: library calls check their operands as kernel accesses are checked.
void check_device_range(Backend& backend, DevicePtr ptr, std::uint64_t bytes, const char* what);
// Library calls served on the host (cuBLASLt) mark what they write for initcheck.
void mark_device_initialized(Backend& backend, DevicePtr ptr, std::uint64_t bytes);

// While off, launches are checked (handle, dims, shared memory) and counted but their kernels do
// not run, nor do library calls (cuBLASLt, computed on the host here) or a graph's nodes (its
// launch is counted and returns): a benchmark measures the host's cost of a call without the
// interpreter's (a real GPU's launch returns once the work is queued). Nothing they write is
// written. Returns the previous setting; on by default.
bool set_kernel_execution(bool on);

// Makes the virtual GPU `backend` report compute capability major.minor, with that
// architecture's shared memory limits (shared_memory_limits.h); sm_90 by default. For tests.
void set_compute_capability(Backend& backend, int major, int minor);
// Makes it report `sm_count` SMs (132 by default, an H100 SXM's; an A100 has 108). For tests of
// schedules that size grids by the SM count.
void set_sm_count(Backend& backend, int sm_count);
// Makes its per-block shared memory opt-in maximum `bytes` (48 KiB: a device that allows no
// more than the static limit), until the next set_compute_capability. For tests.
void set_shared_memory_optin(Backend& backend, std::size_t bytes);

// While on, events recorded stay unfinished (event_done false) until a synchronization (event,
// stream or device) that covers them, as on a GPU still busy: tests of code that must not reuse
// a buffer before its copy's event completes. Returns the previous setting; off by default.
bool hold_events(bool on);

// How a fault inside a kernel (an illegal address, a trap) reaches the host.
//  - immediate (the default): the launch throws the KernelFault naming the kernel, block, thread
//    and instruction; nothing is left behind, so a test goes on after it.
//  - late, as CUDA reports it: the launch returns; the device stops (launches after it do not
//    run); the next call that waits for the device (synchronize, a stream or event
//    synchronization, an event query, a copy to the host, an upload from pageable memory) throws
//    a KernelFault worded as the driver's error ("cuCtxSynchronize failed:
//    CUDA_ERROR_ILLEGAL_ADDRESS (...)"), naming no kernel. It is sticky, as a CUDA context is
//    unusable after a fault: every later call but frees and destroys throws it too.
// With KILN_LAUNCH_BLOCKING=1 (launch_blocking.h) each launch waits for its kernel, so in either
// mode the launch throws, naming the kernel, its grid and block (and in late mode still
// poisons). The mode starts from KILN_VGPU_FAULTS=immediate|late; setting it clears a fault
// (a fresh context). Returns the previous mode.
enum class FaultMode { immediate, late };
FaultMode set_fault_mode(Backend& backend, FaultMode mode);

}  // namespace kiln::cuda::vgpu
