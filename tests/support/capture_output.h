// Runs a piece of code with a file descriptor (1: stdout, 2: stderr) redirected to a temporary
// file, and returns what was written there: for tests of printed output.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace kiln::test {

template <typename Body>
std::string capture_output(int fd, Body body) {
  std::fflush(stdout);
  std::fflush(stderr);
  char path[] = "/tmp/kiln_capture_XXXXXX";
  int file = mkstemp(path);
  int saved = dup(fd);
  dup2(file, fd);
  body();
  std::fflush(stdout);
  std::fflush(stderr);
  dup2(saved, fd);
  close(saved);
  close(file);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  unlink(path);
  return text.str();
}

}  // namespace kiln::test
