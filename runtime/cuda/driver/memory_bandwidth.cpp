// A GPU's peak DRAM bandwidth (see memory_bandwidth.h).
#include "runtime/cuda/driver/memory_bandwidth.h"

#include "runtime/cuda/driver/driver_api.h"
#include "runtime/error.h"

namespace kiln::cuda::driver {

MemoryBandwidth peak_memory_bandwidth(int ordinal) {
  const DriverApi& api = driver_api();
  auto check = [&](CUresult r, const char* call) {
    KILN_CHECK(r == CUDA_SUCCESS, "{} (device {}) failed: {}", call, ordinal, error_text(api, r));
  };
  CUdevice dev = 0;
  check(api.device_get(&dev, ordinal), "cuDeviceGet");
  MemoryBandwidth b;
  check(api.device_get_attribute(&b.memory_clock_khz, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, dev),
        "cuDeviceGetAttribute(MEMORY_CLOCK_RATE)");
  check(
      api.device_get_attribute(&b.bus_width_bits, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, dev),
      "cuDeviceGetAttribute(GLOBAL_MEMORY_BUS_WIDTH)");
  return b;
}

}  // namespace kiln::cuda::driver
