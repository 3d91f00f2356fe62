// The code generator's launch counters as single numbers, for tests that count what a call
// launched, compiled or looked up.
#pragma once

#include <cstdint>

#include "jit/codegen/launch_stats.h"

namespace kiln::test {

inline std::int64_t launches() {
  return jit::codegen::launch_stats().launches.load();
}
inline std::int64_t compiles() {
  return jit::codegen::launch_stats().compiles.load();
}
inline std::int64_t lookups() {
  return jit::codegen::launch_stats().cache_hits.load();
}

}  // namespace kiln::test
