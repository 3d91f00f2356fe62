// Runs a shell command from a test and captures what it printed (the kiln tool, cmake, helper
// processes).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace kiln::test {

struct CommandResult {
  int status = -1;     // the exit status, or -1 when the command did not exit normally
  std::string output;  // stdout and stderr together
};

inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (std::size_t n = fread(buf, 1, sizeof buf, p)) r.output.append(buf, n);
  int status = pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace kiln::test
