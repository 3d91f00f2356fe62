// Errors a kernel reports through a flag in device memory (an index out of range), read by the
// host at the next synchronizing copy to it instead of right after the launch: a launch never
// waits for its own result, so a warm compiled call stays free of host syncs, as PyTorch's
// device-side asserts are. The flags are slots of one zeroed device buffer, read back in one
// copy and zeroed again, so pending checks cost no allocation. KILN_SYNC_CHECKS=1 reads each
// flag right after its launch, so the error surfaces at the op that caused it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/cuda/backend.h"

namespace kiln {

class Tensor;

// Throws the error a set flag stands for; gets the flag's words: [set, detail].
using DeviceCheckRaiser = std::function<void(std::span<const std::int64_t> words)>;

// A flag reserved for the kernel about to be launched: two zeroed i64 words in device memory
// (word 0 non-zero: the error `raise` throws). The pending checks stay locked until launched()
// or destruction, so a sync on another thread never reads the slot before its kernel is issued.
class DeviceCheck {
 public:
  DeviceCheck(std::unique_lock<std::mutex> lock, cuda::DevicePtr flag)
      : lock_(std::move(lock)), flag_(flag) {}
  cuda::DevicePtr flag() const { return flag_; }
  // The kernel is issued: unlocks, and under KILN_SYNC_CHECKS reads the flags now.
  void launched();

 private:
  std::unique_lock<std::mutex> lock_;
  cuda::DevicePtr flag_;
};
DeviceCheck reserve_device_check(DeviceCheckRaiser raise);

// The flags of the checked kernels a CUDA graph holds. While a graph is captured on this thread
// (DeviceCheckCapture), its kernels' flags are slots of the graph's own zeroed buffer, so that
// every replay sets the same slots; each replay makes them pending (replayed()) until a sync
// reads and zeroes them, as it does the process's flags.
struct GraphDeviceChecks {
  GraphDeviceChecks();  // allocates the zeroed buffer: before the capture begins
  ~GraphDeviceChecks();
  std::unique_ptr<Tensor> flags;
  std::vector<DeviceCheckRaiser> raisers;
  GraphDeviceChecks(const GraphDeviceChecks&) = delete;
  GraphDeviceChecks& operator=(const GraphDeviceChecks&) = delete;
};
// Redirects this thread's reserve_device_check to `checks` while it lives.
class DeviceCheckCapture {
 public:
  explicit DeviceCheckCapture(std::shared_ptr<GraphDeviceChecks> checks);
  ~DeviceCheckCapture();
  DeviceCheckCapture(const DeviceCheckCapture&) = delete;
  DeviceCheckCapture& operator=(const DeviceCheckCapture&) = delete;
};
// A replay of a graph with `checks` was queued: its flags are read at the next sync.
void replayed(const std::shared_ptr<GraphDeviceChecks>& checks);

// Reads every pending flag (one copy: a sync) and raises the error of the first one set, in
// launch order. Copies from a CUDA device to the host call it first; every pending check is
// consumed, raised or not.
void run_device_checks();

std::size_t pending_device_checks();

// KILN_SYNC_CHECKS from code: true reads each flag right after its launch.
void set_sync_device_checks(bool on);

// What a raiser appends to its message: where the error was found, and how to see it at the op.
std::string_view device_check_note();

}  // namespace kiln
