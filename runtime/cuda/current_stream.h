// The stream kiln queues its work on. Launches, cuBLASLt calls, device copies and allocations go
// to the current stream: kiln's own, created on first use, unless a StreamGuard on this thread
// names another (torch.cuda.stream's role). Stream capture for CUDA graphs needs a stream that is
// not the legacy one; kiln's is created blocking (CU_STREAM_DEFAULT), so work a user queues on
// the legacy stream stays ordered with it.
#pragma once

#include "runtime/cuda/backend.h"

namespace kiln::cuda {

// kiln's own stream on the process's backend (never the legacy stream).
Stream kiln_stream();
// The stream of this thread's kiln work: the innermost StreamGuard's, else kiln_stream().
Stream current_stream();

// Makes `stream` this thread's current stream while it lives (nullptr: the legacy stream).
class StreamGuard {
 public:
  explicit StreamGuard(Stream stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
  bool had_previous_;
};

}  // namespace kiln::cuda
