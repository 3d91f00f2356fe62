// Sets an environment variable for one scope and restores what was there (the virtual GPU reads
// KILN_VGPU_CHECK and KILN_VGPU_SCHEDULE at each launch, so tests switch modes this way).
#pragma once

#include <cstdlib>
#include <string>

namespace kiln::test {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_;
  std::string old_;
};

}  // namespace kiln::test
