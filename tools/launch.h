// `kiln launch`: starts N processes of one program with torchrun's environment (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), prefixes each line they
// print with its rank, and when one exits non-zero stops the others and names it.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace kiln::tools {

// A TCP port of this machine that nothing listens on now (the kernel's pick for port 0).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

struct LaunchOptions {
  int processes = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  // 0: a free port of this machine
  int grace_seconds = 5;    // between SIGTERM and SIGKILL when stopping the others
  std::vector<std::string> command;
};

// The exit status for `kiln launch`: 0 when every rank exited 0, else 1 (the first rank that
// failed named on stderr).
int launch(const LaunchOptions& options);

}  // namespace kiln::tools
