// The driver-version rule and cuBLASLt's dlopen order (see cuda_versions.h).
#include "runtime/cuda/cuda_versions.h"

#include <fmt/format.h>

namespace kiln::cuda {

std::string cuda_version_text(int version) {
  return fmt::format("{}.{}", version / 1000, version % 1000 / 10);
}

DriverVersionCheck check_driver_version(int driver_version, int toolkit_version) {
  DriverVersionCheck out;
  const std::string driver = cuda_version_text(driver_version);
  const std::string toolkit = cuda_version_text(toolkit_version);
  if (driver_version <= 0) {
    out.error = fmt::format(
        "the CUDA driver reports no CUDA version (cuDriverGetVersion gave {}); kiln was built "
        "with the CUDA {} toolkit",
        driver_version, toolkit);
  } else if (driver_version / 1000 < toolkit_version / 1000) {
    out.error = fmt::format(
        "the CUDA driver supports CUDA {} (cuDriverGetVersion {}), older than the CUDA {} "
        "toolkit kiln was built with, which needs a driver for CUDA {}.0 or later: update the "
        "driver, or run on the virtual GPU (KILN_CUDA=virtual)",
        driver, driver_version, toolkit, toolkit_version / 1000);
  } else if (driver_version < toolkit_version) {
    out.warning = fmt::format(
        "kiln: the CUDA driver supports CUDA {} (cuDriverGetVersion {}), older than the CUDA {} "
        "toolkit kiln was built with: cubins load, PTX from the newer NVRTC may not",
        driver, driver_version, toolkit);
  }
  return out;
}

std::vector<std::string> cublaslt_candidates(const char* cuda_home,
                                             const std::string& library_dir) {
  std::vector<std::string> tries;
  for (const char* soname : {"libcublasLt.so.13", "libcublasLt.so.12"}) {
    tries.emplace_back(soname);
    if (cuda_home && *cuda_home) tries.push_back(fmt::format("{}/lib64/{}", cuda_home, soname));
    tries.push_back(fmt::format("{}/{}", library_dir, soname));
  }
  return tries;
}

}  // namespace kiln::cuda
