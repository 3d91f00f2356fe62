// Pending device-side checks (see device_checks.h).
#include "runtime/device_checks.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "runtime/cuda/current_stream.h"
#include "runtime/cuda/host_sync.h"
#include "runtime/tensor.h"

namespace kiln {
namespace {

// Slots of the flag buffer: a run this long between syncs reads the flags before going on.
constexpr std::size_t kSlots = 1024;
constexpr std::size_t kSlotBytes = 2 * sizeof(std::int64_t);

struct PendingChecks {
  std::mutex mutex;
  Tensor flags;  // kSlots x 2 i64 on the device, zero where no kernel set one
  std::vector<DeviceCheckRaiser> raisers;  // one per slot in use, in launch order
};

// Never destroyed: a tensor freed after the device allocator at exit would outlive it.
PendingChecks& pending() {
  static auto* p = new PendingChecks;
  return *p;
}

std::atomic<bool>& sync_checks_flag() {
  static std::atomic<bool> on = [] {
    const char* v = std::getenv("KILN_SYNC_CHECKS");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return on;
}

bool sync_checks() {
  return sync_checks_flag().load(std::memory_order_relaxed);
}

cuda::DevicePtr address(const Tensor& t) {
  return reinterpret_cast<cuda::DevicePtr>(t.raw_data());
}

// Reads and zeroes the slots in use; the caller holds the mutex. Returns the first error's
// raiser and words, if one was set.
std::pair<DeviceCheckRaiser, std::vector<std::int64_t>> drain(PendingChecks& p) {
  std::size_t used = p.raisers.size();
  if (used == 0) return {};
  std::vector<std::int64_t> words(2 * used);
  cuda::Backend& be = cuda::backend();
  cuda::count_device_to_host_copy();
  const cuda::Stream stream = cuda::current_stream();
  be.copy_to_host(words.data(), address(p.flags), used * kSlotBytes, stream);
  be.memset8(address(p.flags), 0, used * kSlotBytes, stream);
  std::vector<DeviceCheckRaiser> raisers;
  raisers.swap(p.raisers);
  for (std::size_t i = 0; i < used; ++i)
    if (words[2 * i] != 0) return {std::move(raisers[i]), {words[2 * i], words[2 * i + 1]}};
  return {};
}

void drain_and_raise(std::unique_lock<std::mutex>& lock) {
  auto [raise, words] = drain(pending());
  lock.unlock();
  if (raise) raise(words);
}

}  // namespace

DeviceCheck reserve_device_check(DeviceCheckRaiser raise) {
  PendingChecks& p = pending();
  std::unique_lock lock(p.mutex);
  if (!p.flags.defined())
    p.flags = zeros({2 * static_cast<std::int64_t>(kSlots)}, DType::i64, Device::cuda());
  if (p.raisers.size() == kSlots) {
    drain_and_raise(lock);  // a full buffer: read it before reusing its slots
    lock.lock();
  }
  cuda::DevicePtr slot = address(p.flags) + p.raisers.size() * kSlotBytes;
  p.raisers.push_back(std::move(raise));
  return DeviceCheck(std::move(lock), slot);
}

void DeviceCheck::launched() {
  if (lock_.owns_lock()) lock_.unlock();
  if (sync_checks()) run_device_checks();
}

void run_device_checks() {
  std::unique_lock lock(pending().mutex);
  drain_and_raise(lock);
}

std::size_t pending_device_checks() {
  std::lock_guard lock(pending().mutex);
  return pending().raisers.size();
}

void set_sync_device_checks(bool on) {
  sync_checks_flag().store(on);
}

std::string_view device_check_note() {
  return sync_checks() ? ""
                       : " (found by a kernel launched before this sync; KILN_SYNC_CHECKS=1 "
                         "raises it at the op)";
}

}  // namespace kiln
