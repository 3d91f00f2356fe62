// `kiln launch`: fork and exec per rank, one pipe per rank for its stdout and stderr, a poll loop
// that prefixes lines and reaps exits, and SIGTERM then SIGKILL to the rest on a failure.
#include "tools/launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <fmt/format.h>

namespace kiln::tools {

namespace {

volatile std::sig_atomic_t interrupted = 0;

struct Rank {
  pid_t pid = -1;
  int fd = -1;          // read end of its output, -1 once closed
  std::string pending;  // a line not yet ended
  std::optional<int> status;
};

pid_t start(const LaunchOptions& o, int rank, int port, int& read_fd) {
  int p[2];
  if (::pipe(p) != 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group: stopping it stops what it started
    ::dup2(p[1], 1);
    ::dup2(p[1], 2);
    ::close(p[0]);
    ::close(p[1]);
    auto set = [](const char* k, const std::string& v) { ::setenv(k, v.c_str(), 1); };
    set("RANK", std::to_string(rank));
    set("LOCAL_RANK", std::to_string(rank));
    set("WORLD_SIZE", std::to_string(o.processes));
    set("LOCAL_WORLD_SIZE", std::to_string(o.processes));
    set("MASTER_ADDR", o.master_addr);
    set("MASTER_PORT", std::to_string(port));
    std::vector<char*> argv;
    for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "kiln launch: cannot run %s: %s\n", argv[0], std::strerror(errno));
    std::_Exit(127);
  }
  ::close(p[1]);
  read_fd = p[0];
  return pid;
}

void emit(int rank, const std::string& line) {
  std::string out = fmt::format("[rank {}] {}\n", rank, line);
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
}

// Reads what is there; prints whole lines; closes the fd at its end.
void drain(Rank& r, int rank) {
  char buf[4096];
  ssize_t n = ::read(r.fd, buf, sizeof buf);
  if (n <= 0) {
    if (!r.pending.empty()) emit(rank, r.pending);
    r.pending.clear();
    ::close(r.fd);
    r.fd = -1;
    return;
  }
  r.pending.append(buf, static_cast<std::size_t>(n));
  std::size_t start = 0, nl;
  while ((nl = r.pending.find('\n', start)) != std::string::npos) {
    emit(rank, r.pending.substr(start, nl - start));
    start = nl + 1;
  }
  r.pending.erase(0, start);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {}", WTERMSIG(status));
  return "stopped";
}

}  // namespace

int launch(const LaunchOptions& o) {
  if (o.processes < 1 || o.command.empty()) {
    std::fprintf(stderr, "kiln launch: needs -n N >= 1 and a program after --\n");
    return 2;
  }
  int port = o.master_port == 0 ? free_port() : o.master_port;
  std::signal(SIGINT, [](int) { interrupted = 1; });
  std::signal(SIGTERM, [](int) { interrupted = 1; });
  std::vector<Rank> ranks(static_cast<std::size_t>(o.processes));
  for (int r = 0; r < o.processes; ++r) ranks[r].pid = start(o, r, port, ranks[r].fd);
  std::optional<int> failed;
  std::optional<std::chrono::steady_clock::time_point> kill_at;
  auto stop_others = [&](int sig) {
    for (auto& r : ranks)
      if (!r.status && r.pid > 0) ::kill(-r.pid, sig);
  };
  while (true) {
    std::vector<pollfd> fds;
    std::vector<int> which;
    for (int r = 0; r < o.processes; ++r)
      if (ranks[r].fd >= 0) {
        fds.push_back({ranks[r].fd, POLLIN, 0});
        which.push_back(r);
      }
    ::poll(fds.data(), fds.size(), 100);
    for (std::size_t i = 0; i < fds.size(); ++i)
      if (fds[i].revents) drain(ranks[which[i]], which[i]);
    bool all_done = true;
    for (int r = 0; r < o.processes; ++r) {
      Rank& k = ranks[r];
      int status = 0;
      if (!k.status && k.pid > 0 && ::waitpid(k.pid, &status, WNOHANG) == k.pid) {
        k.status = status;
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && !failed) {
          failed = r;
          std::fprintf(stderr, "kiln launch: rank %d %s; stopping the other ranks\n", r,
                       describe_status(status).c_str());
          stop_others(SIGTERM);
          kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(o.grace_seconds);
        }
      }
      all_done = all_done && (k.status || k.pid <= 0) && k.fd < 0;
    }
    if (interrupted && !kill_at) {
      stop_others(SIGTERM);
      kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(o.grace_seconds);
    }
    if (kill_at && std::chrono::steady_clock::now() > *kill_at) stop_others(SIGKILL);
    if (all_done) break;
  }
  if (failed) {
    std::fprintf(stderr, "kiln launch: failed: rank %d %s\n", *failed,
                 describe_status(*ranks[*failed].status).c_str());
    return 1;
  }
  return interrupted ? 1 : 0;
}

}  // namespace kiln::tools
