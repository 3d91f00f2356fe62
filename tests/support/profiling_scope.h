// The virtual GPU's profiler on for a scope, with the profiles cleared first: stop() ends it
// where the test reads what it recorded, and the destructor ends it however the scope ends (a
// failed BOOST_TEST_REQUIRE or an exception), so that profiling never leaks into later cases.
#pragma once

#include "runtime/cuda/virtual/profiler.h"

namespace kiln::test {

class ProfilingScope {
 public:
  ProfilingScope() {
    cuda::vgpu::set_profiling(true);
    cuda::vgpu::clear_profiles();
  }
  ~ProfilingScope() { stop(); }
  ProfilingScope(const ProfilingScope&) = delete;
  ProfilingScope& operator=(const ProfilingScope&) = delete;
  void stop() { cuda::vgpu::set_profiling(false); }
};

}  // namespace kiln::test
