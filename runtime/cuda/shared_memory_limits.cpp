// The per-architecture shared memory table (see shared_memory_limits.h).
#include "runtime/cuda/shared_memory_limits.h"

namespace kiln::cuda {

std::size_t shared_memory_optin_limit(int major, int minor) {
  constexpr std::size_t KiB = 1024;
  int cc = major * 10 + minor;
  if (cc >= 120) return 99 * KiB;
  if (cc >= 100) return 227 * KiB;
  if (cc >= 90) return 227 * KiB;
  if (cc == 86 || cc == 89) return 99 * KiB;
  if (cc >= 80) return 163 * KiB;
  if (cc >= 75) return 64 * KiB;
  if (cc >= 70) return 96 * KiB;
  return kDefaultSharedPerBlock;
}

}  // namespace kiln::cuda
