// Stream capture on the virtual GPU (stream_capture.h).
#include "runtime/cuda/virtual/stream_capture.h"

#include <fmt/format.h>

#include <utility>

#include "runtime/error.h"

namespace kiln::cuda::vgpu {
namespace {

CaptureMode& thread_mode() {
  thread_local CaptureMode mode = CaptureMode::global;
  return mode;
}

}  // namespace

CaptureMode StreamCapture::exchange_thread_mode(CaptureMode mode) {
  return std::exchange(thread_mode(), mode);
}

void StreamCapture::begin(Stream s, CaptureMode mode) {
  KILN_CHECK(s != nullptr,
             "virtual GPU: cuStreamBeginCapture failed: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED "
             "(the legacy stream cannot capture)");
  KILN_CHECK(!active(),
             "virtual GPU: cuStreamBeginCapture failed: CUDA_ERROR_ILLEGAL_STATE (a stream is "
             "capturing already; the virtual GPU records one capture at a time)");
  stream_ = s;
  mode_ = mode;
  thread_ = std::this_thread::get_id();
  nodes_.clear();
  invalidated_.clear();
}

std::vector<GraphNode> StreamCapture::end(Stream s) {
  KILN_CHECK(captures(s),
             "virtual GPU: cuStreamEndCapture failed: CUDA_ERROR_ILLEGAL_STATE (the stream is "
             "not capturing)");
  stream_.reset();
  std::vector<GraphNode> nodes = std::move(nodes_);
  nodes_.clear();
  if (!invalidated_.empty())
    throw Error(fmt::format(
        "virtual GPU: cuStreamEndCapture failed: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (the "
        "capture was invalidated: {})",
        std::exchange(invalidated_, {})));
  return nodes;
}

void StreamCapture::fail(const char* call, const char* status, const std::string& why) {
  std::string message = fmt::format("{} failed: {} ({})", call, status, why);
  if (invalidated_.empty()) invalidated_ = message;
  throw Error("virtual GPU: " + message);
}

void StreamCapture::check_safe(const char* call, const char* what) {
  if (!active() || thread_mode() == CaptureMode::relaxed) return;
  const bool forbidden = mode_ == CaptureMode::global || (mode_ == CaptureMode::thread_local_ &&
                                                          thread_ == std::this_thread::get_id());
  if (!forbidden) return;
  fail(call, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
       fmt::format("operation not permitted when stream is capturing: {}", what));
}

void StreamCapture::check_legacy(const char* call) {
  if (!active()) return;
  fail(call, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
       "the legacy stream waits for every blocking stream, and one is capturing");
}

void StreamCapture::refuse(const char* call, const std::string& why) {
  fail(call, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
       fmt::format("operation not permitted when stream is capturing: {}", why));
}

}  // namespace kiln::cuda::vgpu
