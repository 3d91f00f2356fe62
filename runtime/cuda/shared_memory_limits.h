// Shared memory a thread block may have, per GPU architecture: 48 KiB of static (__shared__)
// memory, and up to a per-architecture maximum in all once the function opts in to more dynamic
// memory with cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES). Without the
// opt-in, static + dynamic may not pass 48 KiB.
#pragma once

#include <cstddef>

namespace kiln::cuda {

inline constexpr std::size_t kDefaultSharedPerBlock = 48 * 1024;

// The opt-in maximum of compute capability major.minor (the CUDA C++ Programming Guide's table of
// technical specifications): sm_70 96 KiB, sm_75 64 KiB, sm_80/87 163 KiB, sm_86/89 99 KiB,
// sm_90 and sm_100 227 KiB, sm_120 99 KiB. Unknown newer ones take the nearest older entry.
std::size_t shared_memory_optin_limit(int major, int minor);

}  // namespace kiln::cuda
