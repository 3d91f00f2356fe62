// A GPU's peak DRAM bandwidth from the driver: memory clock x bus width x 2 (double data rate)
// / 8, from cuDeviceGetAttribute. What bench_bandwidth compares achieved bandwidth against.
#pragma once

namespace kiln::cuda::driver {

struct MemoryBandwidth {
  int memory_clock_khz = 0;  // CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE
  int bus_width_bits = 0;    // CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH
  double bytes_per_second() const { return memory_clock_khz * 1e3 * 2 * bus_width_bits / 8; }
};

// kiln::Error when there is no driver or no such device.
MemoryBandwidth peak_memory_bandwidth(int ordinal = 0);

}  // namespace kiln::cuda::driver
