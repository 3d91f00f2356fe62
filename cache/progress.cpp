// The compile progress bar (see progress.h).
#include "cache/progress.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace kiln::cache {

CompileProgress::CompileProgress(int total)
    : total_(total),
      drawing_(total >= 2 && ::isatty(2)),
      start_(std::chrono::steady_clock::now()) {}

CompileProgress::~CompileProgress() {
  finish();
}

std::string CompileProgress::line(int done, int total, double seconds, std::string_view kernel,
                                  int width) {
  int filled = total > 0 ? done * width / total : width;
  return fmt::format("[{}{}] {}/{} kernels, {:.1f} s  {}", std::string(filled, '#'),
                     std::string(width - filled, ' '), done, total, seconds, kernel);
}

void CompileProgress::draw(std::string_view kernel) {
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string text = "kiln: compiling " + line(done_, total_, s, kernel);
  if (text.size() > 100) text.resize(100);
  // \r and clear-to-end-of-line: redrawn in place.
  std::fprintf(stderr, "\r%s\033[K", text.c_str());
  std::fflush(stderr);
}

void CompileProgress::start(std::string_view kernel) {
  ++done_;
  if (drawing_) draw(kernel);
}

void CompileProgress::finish() {
  if (!drawing_) return;
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(stderr, "\r\033[Kkiln: compiled %d kernels in %.1f s\n", total_, s);
  std::fflush(stderr);
  drawing_ = false;
}

}  // namespace kiln::cache
