// The process group's communication thread and its failures.
#include "dist/process_group.h"

#include "runtime/error.h"

namespace kiln::dist {

ProcessGroup::ProcessGroup(const std::string& backend, const GroupConfig& config,
                           const std::string& master_addr, int master_port)
    : config_(config) {
  store_ = std::make_unique<TcpStore>(master_addr, master_port, config.rank, config.world_size,
                                      config.timeout);
  try {
    if (backend == "gloo")
      backend_ = make_gloo_backend(*store_, config);
    else
      backend_ = make_nccl_backend(*store_, config);
  } catch (const std::exception& e) {
    std::string peers = describe_peers();
    throw Error(
        fmt::format("kiln::dist: init_process_group(\"{}\") failed on rank {} of {}: {}; "
                    "{}",
                    backend, config.rank, config.world_size, peers, e.what()));
  }
  thread_ = std::thread([this] { loop(); });
}

ProcessGroup::~ProcessGroup() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // After a failure, rank 0's store outlives its connections: a peer still waiting on this rank
  // fails at once and can ask the store which rank went first.
  backend_.reset();
  if (!broken_.empty())
    store_->linger(std::min<std::chrono::milliseconds>(config_.timeout, std::chrono::seconds(10)));
}

Work ProcessGroup::submit(std::string what, std::function<void()> run,
                          std::function<void()> finish) {
  auto state = std::make_shared<Work::State>();
  state->what = std::move(what);
  state->finish = std::move(finish);
  if (backend_->takes_device_memory())  // enqueued on the device: done once it has run there
    state->finish = [this, f = std::move(state->finish)] {
      backend_->synchronize();
      if (f) f();
    };
  state->timeout = config_.timeout;
  std::unique_lock lock(mutex_);
  if (!broken_.empty()) {
    state->error = fmt::format("kiln::dist: {} on rank {}: the process group failed earlier: {}",
                               state->what, config_.rank, broken_);
    state->done = true;
  } else if (backend_->takes_device_memory()) {
    lock.unlock();
    execute(*state, run);
  } else {
    queue_.emplace_back(state, std::move(run));
    lock.unlock();
    queue_cv_.notify_all();
  }
  return Work(state);
}

void ProcessGroup::loop() {
  while (true) {
    std::unique_lock lock(mutex_);
    queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    auto [state, run] = std::move(queue_.front());
    queue_.pop_front();
    bool broken = !broken_.empty();
    lock.unlock();
    if (broken) {
      std::lock_guard state_lock(state->mutex);
      state->error = fmt::format("kiln::dist: {} on rank {}: the process group failed earlier: {}",
                                 state->what, config_.rank, broken_);
      state->done = true;
      state->done_cv.notify_all();
      continue;
    }
    execute(*state, run);
  }
}

void ProcessGroup::execute(Work::State& state, const std::function<void()>& run) {
  std::string error;
  auto started = std::chrono::steady_clock::now();
  try {
    run();
  } catch (const std::exception& e) {
    error = fmt::format("kiln::dist: {} failed on rank {} of {} (timeout {} ms): {}; {}",
                        state.what, config_.rank, config_.world_size, config_.timeout.count(),
                        describe_peers(), e.what());
    std::lock_guard lock(mutex_);
    if (broken_.empty()) broken_ = error;
  }
  std::lock_guard lock(state.mutex);
  state.started = started;
  state.ended = std::chrono::steady_clock::now();
  state.error = std::move(error);
  state.done = true;
  state.done_cv.notify_all();
}

std::string ProcessGroup::describe_peers() {
  if (config_.world_size == 1) return "no peers";
  // The store sees a dead rank's connection close at about the time a collective does: look
  // again for a moment before saying no peer died.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1000);
  try {
    while (true) {
      std::vector<int> dead = store_->dead_ranks();
      if (!dead.empty()) {
        std::string later;
        for (std::size_t i = 1; i < dead.size(); ++i)
          later += (later.empty() ? "; then rank " : ", ") + std::to_string(dead[i]);
        return fmt::format("peer rank {} is gone (its process exited or lost its connection{})",
                           dead[0], later);
      }
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const std::exception&) {
    return fmt::format("peer rank 0 is gone (its store at {} is unreachable)", store_->address());
  }
  return "no peer is known to be gone (a peer may be slow, not started, or in another collective)";
}

void ProcessGroup::check_same(const std::string& op, const std::string& mine) {
  std::string prefix = fmt::format("check/{}/", checks_++);
  store_->set(prefix + std::to_string(config_.rank), std::vector<char>(mine.begin(), mine.end()));
  for (int r = 0; r < config_.world_size; ++r) {
    if (r == config_.rank) continue;
    auto bytes = store_->get(prefix + std::to_string(r));
    std::string theirs(bytes.begin(), bytes.end());
    KILN_CHECK(theirs == mine,
               "kiln::dist: {}: rank {} passes {} but rank {} passes {} (every rank's shapes "
               "and dtypes must match)",
               op, config_.rank, mine, r, theirs);
  }
}

void ProcessGroup::shutdown() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  store_->close();
}

}  // namespace kiln::dist
