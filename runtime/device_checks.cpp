// Pending device-side checks (see device_checks.h).
#include "runtime/device_checks.h"

#include <algorithm>
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
  // Graphs replayed since the last drain, each once.
  std::vector<std::shared_ptr<GraphDeviceChecks>> replays;
};

// The graph being captured on this thread, whose buffer takes the flags reserved.
std::shared_ptr<GraphDeviceChecks>& capturing() {
  thread_local std::shared_ptr<GraphDeviceChecks> checks;
  return checks;
}

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

using Raised = std::pair<DeviceCheckRaiser, std::vector<std::int64_t>>;

// Reads and zeroes the first `used` slots of `flags`; the first set one's raiser and words.
Raised read_slots(const Tensor& flags, std::span<const DeviceCheckRaiser> raisers) {
  const std::size_t used = raisers.size();
  std::vector<std::int64_t> words(2 * used);
  cuda::Backend& be = cuda::backend();
  cuda::count_device_to_host_copy();
  const cuda::Stream stream = cuda::current_stream();
  be.copy_to_host(words.data(), address(flags), used * kSlotBytes, stream);
  be.memset8(address(flags), 0, used * kSlotBytes, stream);
  for (std::size_t i = 0; i < used; ++i)
    if (words[2 * i] != 0) return {raisers[i], {words[2 * i], words[2 * i + 1]}};
  return {};
}

// Reads and zeroes the slots in use, the process's and those of the graphs replayed; the caller
// holds the mutex. Returns the first error's raiser and words, if one was set.
Raised drain(PendingChecks& p) {
  Raised first;
  if (!p.raisers.empty()) {
    std::vector<DeviceCheckRaiser> raisers;
    raisers.swap(p.raisers);
    first = read_slots(p.flags, raisers);
  }
  std::vector<std::shared_ptr<GraphDeviceChecks>> replays;
  replays.swap(p.replays);
  for (const auto& graph : replays) {
    Raised r = read_slots(*graph->flags, graph->raisers);
    if (!first.first && r.first) first = std::move(r);
  }
  return first;
}

void drain_and_raise(std::unique_lock<std::mutex>& lock) {
  auto [raise, words] = drain(pending());
  lock.unlock();
  if (raise) raise(words);
}

}  // namespace

GraphDeviceChecks::GraphDeviceChecks()
    : flags(std::make_unique<Tensor>(
          zeros({2 * static_cast<std::int64_t>(kSlots)}, DType::i64, Device::cuda()))) {}

GraphDeviceChecks::~GraphDeviceChecks() = default;

DeviceCheckCapture::DeviceCheckCapture(std::shared_ptr<GraphDeviceChecks> checks) {
  capturing() = std::move(checks);
}

DeviceCheckCapture::~DeviceCheckCapture() {
  capturing().reset();
}

void replayed(const std::shared_ptr<GraphDeviceChecks>& checks) {
  if (checks->raisers.empty()) return;
  PendingChecks& p = pending();
  std::unique_lock lock(p.mutex);
  if (std::find(p.replays.begin(), p.replays.end(), checks) == p.replays.end())
    p.replays.push_back(checks);
  if (sync_checks()) drain_and_raise(lock);  // KILN_SYNC_CHECKS: at the replay
}

DeviceCheck reserve_device_check(DeviceCheckRaiser raise) {
  PendingChecks& p = pending();
  std::unique_lock lock(p.mutex);
  if (const auto& graph = capturing()) {
    KILN_CHECK(graph->raisers.size() < kSlots,
               "CUDA graph capture: more than {} checked kernels in one graph", kSlots);
    cuda::DevicePtr slot = address(*graph->flags) + graph->raisers.size() * kSlotBytes;
    graph->raisers.push_back(std::move(raise));
    return DeviceCheck(std::move(lock), slot);
  }
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
  // A captured kernel has not run: its graph's replays are read after them.
  if (sync_checks() && !capturing()) run_device_checks();
}

void run_device_checks() {
  std::unique_lock lock(pending().mutex);
  drain_and_raise(lock);
}

std::size_t pending_device_checks() {
  std::lock_guard lock(pending().mutex);
  std::size_t n = pending().raisers.size();
  for (const auto& graph : pending().replays) n += graph->raisers.size();
  return n;
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
