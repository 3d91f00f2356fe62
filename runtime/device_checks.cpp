// Pending device-side checks (see device_checks.h).
#include "runtime/device_checks.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "runtime/cuda/backend.h"

namespace kiln {
namespace {

struct PendingCheck {
  Tensor flag;
  DeviceCheckRaiser raise;
};

struct PendingChecks {
  std::mutex mutex;
  std::vector<PendingCheck> checks;
};

PendingChecks& pending() {
  static PendingChecks p;
  return p;
}

// A long run between syncs keeps at most this many flags alive before reading them.
constexpr std::size_t kMaxPending = 1024;

std::atomic<bool>& sync_checks_flag() {
  static std::atomic<bool> on = [] {
    const char* v = std::getenv("KILN_SYNC_CHECKS");
    return v != nullptr && std::strcmp(v, "0") != 0 && *v != '\0';
  }();
  return on;
}

bool sync_checks() {
  return sync_checks_flag().load(std::memory_order_relaxed);
}

// Raw device reads: a Tensor copy to the host would run the checks again.
std::vector<std::int64_t> read_words(const Tensor& flag) {
  std::vector<std::int64_t> words(static_cast<std::size_t>(flag.numel()));
  cuda::backend().copy_to_host(words.data(), reinterpret_cast<cuda::DevicePtr>(flag.raw_data()),
                               words.size() * sizeof(std::int64_t));
  return words;
}

void check(const PendingCheck& c) {
  auto words = read_words(c.flag);
  if (!words.empty() && words[0] != 0) c.raise(words);
}

}  // namespace

void defer_device_check(Tensor flag, DeviceCheckRaiser raise) {
  KILN_CHECK(flag.device().is_cuda() && flag.dtype() == DType::i64 && flag.is_contiguous(),
             "defer_device_check: the flag must be a contiguous i64 CUDA tensor, got {} {}",
             flag.device().str(), flag.dtype());
  PendingCheck c{std::move(flag), std::move(raise)};
  if (sync_checks()) return check(c);
  bool full = false;
  {
    std::lock_guard lock(pending().mutex);
    pending().checks.push_back(std::move(c));
    full = pending().checks.size() >= kMaxPending;
  }
  if (full) run_device_checks();
}

void run_device_checks() {
  std::vector<PendingCheck> checks;
  {
    std::lock_guard lock(pending().mutex);
    checks.swap(pending().checks);
  }
  for (const auto& c : checks) check(c);
}

void set_sync_device_checks(bool on) {
  sync_checks_flag().store(on);
}

std::string_view device_check_note() {
  return sync_checks() ? ""
                       : " (found by a kernel launched before this sync; KILN_SYNC_CHECKS=1 "
                         "raises it at the op)";
}

std::size_t pending_device_checks() {
  std::lock_guard lock(pending().mutex);
  return pending().checks.size();
}

}  // namespace kiln
