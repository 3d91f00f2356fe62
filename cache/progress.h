// The progress bar a graph's first call draws while NVRTC compiles several kernels: kernels
// done of the total and the elapsed time, redrawn in place on stderr. Drawn only when there
// are at least two kernels to compile and stderr is a terminal; silent otherwise (logs, CI).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace kiln::cache {

class CompileProgress {
 public:
  explicit CompileProgress(int total);
  CompileProgress(const CompileProgress&) = delete;
  CompileProgress& operator=(const CompileProgress&) = delete;
  ~CompileProgress();  // finish()

  // Call before compiling `kernel`; finish() replaces the bar by "compiled N kernels in T s".
  void start(std::string_view kernel);
  void finish();
  bool drawing() const { return drawing_; }

  // "[#####     ] 3/8 kernels, 2.1 s  k_add_relu" at `width` columns of bar.
  static std::string line(int done, int total, double seconds, std::string_view kernel,
                          int width = 24);

 private:
  void draw(std::string_view kernel);
  int total_;
  int done_ = -1;
  bool drawing_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kiln::cache
