// kiln's stream and the thread's current one (see current_stream.h).
#include "runtime/cuda/current_stream.h"

#include <atomic>
#include <mutex>

namespace kiln::cuda {
namespace {

// The backend kiln's stream was made on: a test that swaps backends gets a stream of the new one.
std::atomic<Backend*> stream_backend{nullptr};
std::atomic<Stream> own_stream{nullptr};
std::mutex stream_mutex;

struct ThreadStream {
  bool set = false;
  Stream stream = nullptr;
};
thread_local ThreadStream thread_stream;

}  // namespace

Stream kiln_stream() {
  Backend& be = backend();
  if (stream_backend.load(std::memory_order_acquire) == &be)
    return own_stream.load(std::memory_order_relaxed);
  std::lock_guard lock(stream_mutex);
  if (stream_backend.load(std::memory_order_relaxed) != &be) {
    // Never destroyed: work may still be queued on it while static destructors run.
    own_stream.store(be.create_stream(), std::memory_order_relaxed);
    stream_backend.store(&be, std::memory_order_release);
  }
  return own_stream.load(std::memory_order_relaxed);
}

Stream current_stream() {
  const ThreadStream& t = thread_stream;
  return t.set ? t.stream : kiln_stream();
}

StreamGuard::StreamGuard(Stream stream)
    : previous_(thread_stream.stream), had_previous_(thread_stream.set) {
  thread_stream = {true, stream};
}

StreamGuard::~StreamGuard() {
  thread_stream = {had_previous_, previous_};
}

}  // namespace kiln::cuda
