// Device time of each kernel launched on the driver backend, measured with a pair of CUDA events
// around every launch while timing is on: what bench_bandwidth (scripts/gpu-check) reports per
// kernel next to the virtual GPU's modeled time. Off by default: the events cost a little each.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::cuda::driver {

struct KernelTime {
  std::string kernel;
  std::int64_t launches = 0;
  double total_ms = 0;  // summed over its launches
};

void set_launch_timing(bool on);
bool launch_timing();

// Waits for every launch timed since the last call and returns one row per kernel name (launches
// summed), in order of first launch. Empty when nothing was timed (timing off, the virtual GPU).
// Call it on the thread that launched (the driver's context is per thread).
std::vector<KernelTime> take_launch_times();

// The driver backend's side: the events recorded around one launch, handed over for
// take_launch_times() to read and destroy.
struct TimedLaunch {
  std::string kernel;
  CUevent start = nullptr, end = nullptr;
};
void add_timed_launch(TimedLaunch launch);

}  // namespace kiln::cuda::driver
