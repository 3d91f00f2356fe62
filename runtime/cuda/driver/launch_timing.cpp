// Per-kernel launch timing on the driver backend (see launch_timing.h).
#include "runtime/cuda/driver/launch_timing.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <utility>

#include "runtime/cuda/driver/driver_api.h"
#include "runtime/cuda/host_sync.h"
#include "runtime/error.h"

namespace kiln::cuda::driver {
namespace {

std::atomic<bool> timing_on{false};
std::mutex timed_mutex;
std::vector<TimedLaunch> timed_launches;  // guarded by timed_mutex

}  // namespace

void set_launch_timing(bool on) {
  timing_on.store(on, std::memory_order_relaxed);
}

bool launch_timing() {
  return timing_on.load(std::memory_order_relaxed);
}

void add_timed_launch(TimedLaunch launch) {
  std::lock_guard lock(timed_mutex);
  timed_launches.push_back(std::move(launch));
}

std::vector<KernelTime> take_launch_times() {
  std::vector<TimedLaunch> launches;
  {
    std::lock_guard lock(timed_mutex);
    launches.swap(timed_launches);
  }
  std::vector<KernelTime> out;
  if (launches.empty()) return out;
  const DriverApi& api = driver_api();
  // Every pair is destroyed even when one fails; the first failure is raised after.
  CUresult failed = CUDA_SUCCESS;
  for (const auto& l : launches) {
    float ms = 0;
    count_synchronization();
    CUresult r = api.event_synchronize(l.end);
    if (r == CUDA_SUCCESS) r = api.event_elapsed_time(&ms, l.start, l.end);
    api.event_destroy(l.start);
    api.event_destroy(l.end);
    if (r != CUDA_SUCCESS) {
      if (failed == CUDA_SUCCESS) failed = r;
      continue;
    }
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const KernelTime& k) { return k.kernel == l.kernel; });
    if (it == out.end()) it = out.insert(out.end(), KernelTime{l.kernel});
    ++it->launches;
    it->total_ms += ms;
  }
  KILN_CHECK(failed == CUDA_SUCCESS,
             "timing kernel launches: cuEventSynchronize / cuEventElapsedTime failed: {}",
             error_text(api, failed));
  return out;
}

}  // namespace kiln::cuda::driver
