// Stream capture on the virtual GPU: what a capture records and which calls it forbids, with
// CUDA's rules. Work queued on the capturing stream becomes graph nodes instead of running; an
// unsafe call (an allocation, a synchronization, a host copy, work on the legacy stream) fails
// and invalidates the capture, so that cuStreamEndCapture reports it, as the driver does.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/cuda/backend.h"

namespace kiln::cuda::vgpu {

// One node of a recorded graph.
struct GraphNode {
  enum class Kind { kernel, copy, memset, host };
  Kind kind = Kind::kernel;
  // kernel: the backend's function handle, its launch shape and its parameters as bytes at the
  // kernel's parameter offsets (what cuLaunchKernel copied when it was recorded).
  cuda::Function function = nullptr;
  Dim3 grid, block;
  unsigned dynamic_shared = 0;
  std::vector<std::uint8_t> params;
  std::vector<std::uint64_t> param_offsets;
  // copy and memset
  DevicePtr dst = 0, src = 0;
  std::size_t bytes = 0;
  std::uint8_t value = 0;
  // host: a library call the virtual GPU computes on the host (cuBLASLt's contract).
  std::function<void()> host;
};

// The capture in progress (one at a time on the virtual GPU) and this thread's capture mode.
class StreamCapture {
 public:
  bool active() const { return stream_.has_value(); }
  bool captures(Stream s) const { return active() && s != nullptr && *stream_ == s; }

  // Throws kiln::Error where a capture is active already or `s` is the legacy stream.
  void begin(Stream s, CaptureMode mode);
  // The nodes recorded; throws the error that invalidated the capture. Ends it either way.
  std::vector<GraphNode> end(Stream s);

  void record(GraphNode node) { nodes_.push_back(std::move(node)); }

  // Before a call that is unsafe while work is recorded (`call`: the driver's name, `what`: why
  // it is unsafe): throws CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture
  // where the capture's mode and this thread's forbid it.
  void check_safe(const char* call, const char* what);
  // Work on the legacy stream joins every blocking stream, a capturing one too: it fails with
  // CUDA_ERROR_STREAM_CAPTURE_IMPLICIT and invalidates the capture.
  void check_legacy(const char* call);
  // A call on the capturing stream that a graph cannot hold (a host copy): fails and
  // invalidates the capture.
  void refuse(const char* call, const std::string& why);

  static CaptureMode exchange_thread_mode(CaptureMode mode);

 private:
  [[noreturn]] void fail(const char* call, const char* status, const std::string& why);

  std::optional<Stream> stream_;
  CaptureMode mode_ = CaptureMode::global;
  std::thread::id thread_;
  std::vector<GraphNode> nodes_;
  std::string invalidated_;  // the first failure, empty while the capture is valid
};

}  // namespace kiln::cuda::vgpu
