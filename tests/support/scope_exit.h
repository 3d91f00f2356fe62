// Runs a function when its scope ends, however it ends: a test that sets a process-wide switch
// puts it back this way, since a failed BOOST_REQUIRE or an exception skips a restore written
// after the checks and leaks the switch into every later case.
#pragma once

#include <utility>

namespace kiln::test {

// `ScopeExit restore([old = set_x(v)] { set_x(old); });`
template <typename F>
class ScopeExit {
 public:
  explicit ScopeExit(F f) : f_(std::move(f)) {}
  ~ScopeExit() { f_(); }
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;

 private:
  F f_;
};

}  // namespace kiln::test
