// A process group: the store, the backend and the communication thread that runs collectives in
// the order they were submitted. A failure names the op, the rank and the peer that is gone
// (the store knows), and breaks the group: later collectives fail at once instead of waiting.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "dist/backend.h"
#include "dist/dist.h"
#include "dist/tcp_store.h"

namespace kiln::dist {

struct Work::State {
  std::string what;  // "all_reduce of 12 f32 elements [3, 4]"
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::string error;             // empty on success
  std::function<void()> finish;  // on the waiting thread, once, after success
  std::chrono::milliseconds timeout{0};
  std::chrono::steady_clock::time_point started, ended;
};

class ProcessGroup {
 public:
  ProcessGroup(const std::string& backend, const GroupConfig& config,
               const std::string& master_addr, int master_port);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  const GroupConfig& config() const { return config_; }
  Backend& backend() { return *backend_; }
  TcpStore& store() { return *store_; }
  int local_rank() const { return local_rank_; }
  void set_local_rank(int r) { local_rank_ = r; }

  // Runs `run` on the communication thread after everything submitted before it (a device
  // backend's on this thread, now: it only enqueues), then `finish` on the thread that waits.
  Work submit(std::string what, std::function<void()> run, std::function<void()> finish = {});
  // Error naming `op` and both ranks unless every rank passes the same `mine` (a description
  // of its arguments); through the store, on the calling thread.
  void check_same(const std::string& op, const std::string& mine);
  // Waits for what is queued, then says goodbye to the store.
  void shutdown();

 private:
  void loop();
  void execute(Work::State& state, const std::function<void()>& run);
  std::string describe_peers();

  GroupConfig config_;
  int local_rank_ = 0;
  std::unique_ptr<TcpStore> store_;
  std::unique_ptr<Backend> backend_;
  std::mutex mutex_;
  std::condition_variable queue_cv_;
  std::deque<std::pair<std::shared_ptr<Work::State>, std::function<void()>>> queue_;
  bool stopping_ = false;
  std::string broken_;  // the first failure's message
  std::int64_t checks_ = 0;
  std::thread thread_;
};

// The group init_process_group made; Error naming `op` when there is none.
ProcessGroup& default_group(const char* op);

}  // namespace kiln::dist
