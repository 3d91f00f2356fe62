// Which CUDA driver and libraries kiln accepts: the driver's version (cuDriverGetVersion) against
// the toolkit kiln was built with, and the order in which cuBLASLt's sonames are tried. Pure
// functions, so the rules are tested without a GPU.
#pragma once

#include <string>
#include <vector>

namespace kiln::cuda {

// 13000 -> "13.0", 12040 -> "12.4" (the encoding of CUDA_VERSION and cuDriverGetVersion).
std::string cuda_version_text(int version);

struct DriverVersionCheck {
  std::string error;    // the driver cannot run this build: why, naming both versions
  std::string warning;  // it can, with a caveat worth a line on stderr
};
// A driver older than the toolkit's major version cannot load anything the toolkit builds (CUDA's
// minor-version compatibility covers only the same major). One of the same major but an older
// minor loads cubins, but not the newer PTX its NVRTC may emit.
DriverVersionCheck check_driver_version(int driver_version, int toolkit_version);

// The files to dlopen for cuBLASLt, in order: each soname (libcublasLt.so.13, then .so.12) on the
// loader's search path, under $CUDA_HOME/lib64 (when `cuda_home` is set), then in `library_dir`.
std::vector<std::string> cublaslt_candidates(const char* cuda_home, const std::string& library_dir);

}  // namespace kiln::cuda
