// The public collectives: the default group, arguments checked and described, tensors staged
// where the backend cannot take them as they are, and the cross-rank checks of debug mode.
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>

#include "dist/dist.h"
#include "dist/process_group.h"
#include "runtime/error.h"
#include "runtime/grad_mode.h"

namespace kiln::dist {

namespace {

std::unique_ptr<ProcessGroup>& group_slot() {
  static std::unique_ptr<ProcessGroup> group;
  return group;
}

bool& debug_flag() {
  static bool on = [] {
    const char* v = std::getenv("KILN_DIST_DEBUG");
    return v && std::string(v) != "0" && std::string(v) != "";
  }();
  return on;
}

int env_int(const char* name, int given, int fallback) {
  if (given >= 0) return given;
  const char* v = std::getenv(name);
  if (!v || !*v) {
    KILN_CHECK(fallback >= 0,
               "kiln::dist: init_process_group needs {} (set in the environment "
               "by `kiln launch` or torchrun, or given in InitOptions)",
               name);
    return fallback;
  }
  try {
    return std::stoi(v);
  } catch (const std::exception&) {
    KILN_CHECK(false, "kiln::dist: {}='{}' is not a number", name, v);
  }
  return 0;
}

std::string describe(const char* op, const Tensor& t) {
  return fmt::format("{} of {} {} elements {}", op, t.numel(), dtype_name(t.dtype()),
                     shape_str(t.shape()));
}

// A buffer a collective reads or writes: the tensor's own memory where the backend can take
// it, else a contiguous copy in the memory it takes, written back after the collective.
struct Staged {
  Tensor original, buffer;
  bool copy_back = false;
};

Staged stage(ProcessGroup& group, const Tensor& t, bool written, const char* op) {
  NoGradGuard no_grad;
  bool device = group.backend().takes_device_memory();
  KILN_CHECK(!device || t.device().is_cuda(),
             "kiln::dist: {} under {} needs a CUDA tensor, not a {} one", op,
             group.backend().name(), t.device().str());
  Staged s{t, t, false};
  bool usable = t.is_contiguous() && (device || t.device().is_cpu());
  if (!usable) {
    s.buffer = device ? t.contiguous() : t.detach().to(Device::cpu()).contiguous();
    if (s.buffer.same(t)) s.buffer = t.clone();
    s.copy_back = written;
  }
  return s;
}

void write_back(const Staged& s) {
  if (!s.copy_back) return;
  NoGradGuard no_grad;
  s.original.copy_(s.buffer);
}

void maybe_check(ProcessGroup& group, const char* op, const Tensor& t) {
  if (debug_flag())
    group.check_same(op, fmt::format("{} {}", dtype_name(t.dtype()), shape_str(t.shape())));
}

}  // namespace

ProcessGroup& default_group(const char* op) {
  KILN_CHECK(group_slot() != nullptr,
             "kiln::dist: {} needs a process group: call dist::init_process_group first", op);
  return *group_slot();
}

void init_process_group(const std::string& backend, InitOptions options) {
  KILN_CHECK(!group_slot(), "kiln::dist: init_process_group: this process already has a group");
  KILN_CHECK(backend == "gloo" || backend == "nccl",
             "kiln::dist: init_process_group: unknown backend '{}' (gloo or nccl)", backend);
  GroupConfig config;
  config.world_size = env_int("WORLD_SIZE", options.world_size, -1);
  config.rank = env_int("RANK", options.rank, -1);
  KILN_CHECK(config.world_size >= 1 && config.rank >= 0 && config.rank < config.world_size,
             "kiln::dist: init_process_group: rank {} is outside a world of size {}", config.rank,
             config.world_size);
  int local_rank = env_int("LOCAL_RANK", options.local_rank, config.rank);
  std::string addr = options.master_addr;
  if (addr.empty()) addr = std::getenv("MASTER_ADDR") ? std::getenv("MASTER_ADDR") : "127.0.0.1";
  int port = options.master_port > 0 ? options.master_port : env_int("MASTER_PORT", -1, -1);
  config.timeout = options.timeout;
  if (const char* t = std::getenv("KILN_DIST_TIMEOUT");
      t && *t && options.timeout == InitOptions{}.timeout)
    config.timeout = std::chrono::milliseconds(static_cast<long long>(std::stod(t) * 1000));
  config.hostname = options.hostname;
  if (config.hostname.empty() && std::getenv("KILN_DIST_HOSTNAME"))
    config.hostname = std::getenv("KILN_DIST_HOSTNAME");
  if (config.hostname.empty()) {
    if (addr == "127.0.0.1" || addr == "localhost") {
      config.hostname = "127.0.0.1";
    } else {
      char name[256] = {};
      ::gethostname(name, sizeof name - 1);
      config.hostname = name;
    }
  }
  // A peer that dies makes a write to its socket raise SIGPIPE, which would kill this rank
  // before the collective can report which peer went. A handler of the program's own stays.
  auto previous = std::signal(SIGPIPE, SIG_IGN);
  if (previous != SIG_DFL && previous != SIG_ERR) std::signal(SIGPIPE, previous);
  group_slot() = std::make_unique<ProcessGroup>(backend, config, addr, port);
  group_slot()->set_local_rank(local_rank);
}

bool is_initialized() {
  return group_slot() != nullptr;
}

void destroy_process_group() {
  if (!group_slot()) return;
  group_slot()->shutdown();
  group_slot().reset();
}

std::string backend() {
  return default_group("backend").backend().name();
}
int rank() {
  return default_group("rank").config().rank;
}
int world_size() {
  return default_group("world_size").config().world_size;
}
int local_rank() {
  return default_group("local_rank").local_rank();
}
std::chrono::milliseconds timeout() {
  return default_group("timeout").config().timeout;
}
bool debug_checks() {
  return debug_flag();
}
void set_debug_checks(bool on) {
  debug_flag() = on;
}

std::uint64_t bytes_written() {
  std::ifstream io("/proc/self/io");
  std::string key;
  std::uint64_t value = 0;
  while (io >> key >> value)
    if (key == "wchar:") return value;
  return 0;
}

void barrier() {
  ProcessGroup& g = default_group("barrier");
  if (g.backend().takes_device_memory()) {
    all_reduce(zeros({1}, DType::f32, Device::cuda(g.local_rank())));
    g.backend().synchronize();
    return;
  }
  g.submit("barrier", [&g] { g.backend().barrier(); }).wait();
}

namespace {

// A collective that writes `t` in place: staged, run on its buffer, written back.
Work in_place(ProcessGroup& g, const char* op, const Tensor& t,
              std::function<void(Backend&, void*, std::size_t, DType)> run) {
  maybe_check(g, op, t);
  auto s = std::make_shared<Staged>(stage(g, t, true, op));
  return g.submit(
      describe(op, t),
      [&g, s, run = std::move(run)] {
        run(g.backend(), s->buffer.raw_data(), static_cast<std::size_t>(s->buffer.numel()),
            s->buffer.dtype());
      },
      [s] { write_back(*s); });
}

}  // namespace

Work all_reduce_async(const Tensor& t, ReduceOp op) {
  ProcessGroup& g = default_group("all_reduce");
  KILN_CHECK(op != ReduceOp::avg || is_floating(t.dtype()),
             "kiln::dist: all_reduce with avg needs a floating tensor, not {}",
             dtype_name(t.dtype()));
  return in_place(g, "all_reduce", t, [op](Backend& b, void* data, std::size_t n, DType dtype) {
    b.all_reduce(data, n, dtype, op);
  });
}

Work broadcast_async(const Tensor& t, int src) {
  ProcessGroup& g = default_group("broadcast");
  KILN_CHECK(src >= 0 && src < g.config().world_size,
             "kiln::dist: broadcast from rank {} in a world of size {}", src,
             g.config().world_size);
  return in_place(g, "broadcast", t, [src](Backend& b, void* data, std::size_t n, DType dtype) {
    b.broadcast(data, n, dtype, src);
  });
}

namespace {

// output (all_gather) or input (reduce_scatter) is world_size chunks of the other along dim 0.
void check_chunks(const char* op, const Tensor& whole, const Tensor& part, int world) {
  bool ok = whole.dtype() == part.dtype() && whole.dim() == part.dim() && part.dim() >= 1 &&
            whole.shape()[0] == part.shape()[0] * world;
  for (std::int64_t d = 1; ok && d < part.dim(); ++d) ok = whole.shape()[d] == part.shape()[d];
  KILN_CHECK_AS(ShapeError, ok,
                "kiln::dist: {}: a {} {} tensor is not {} chunks of a {} {} one along dim 0", op,
                dtype_name(whole.dtype()), shape_str(whole.shape()), world,
                dtype_name(part.dtype()), shape_str(part.shape()));
}

}  // namespace

namespace {

// A collective from `input` into `output`, each staged; only `output` is written back.
Work input_to_output(ProcessGroup& g, const char* op, const Tensor& input, const Tensor& output,
                     std::function<void(Backend&, const Tensor&, const Tensor&)> run) {
  maybe_check(g, op, input);
  auto in = std::make_shared<Staged>(stage(g, input, false, op));
  auto out = std::make_shared<Staged>(stage(g, output, true, op));
  return g.submit(
      describe(op, input),
      [&g, in, out, run = std::move(run)] { run(g.backend(), in->buffer, out->buffer); },
      [out] { write_back(*out); });
}

std::size_t count(const Tensor& t) {
  return static_cast<std::size_t>(t.numel());
}

}  // namespace

Work all_gather_async(const Tensor& output, const Tensor& input) {
  ProcessGroup& g = default_group("all_gather");
  check_chunks("all_gather", output, input, g.config().world_size);
  return input_to_output(g, "all_gather", input, output,
                         [](Backend& b, const Tensor& in, const Tensor& out) {
                           b.all_gather(in.raw_data(), out.raw_data(), count(in), in.dtype());
                         });
}

Work reduce_scatter_async(const Tensor& output, const Tensor& input, ReduceOp op) {
  ProcessGroup& g = default_group("reduce_scatter");
  check_chunks("reduce_scatter", input, output, g.config().world_size);
  return input_to_output(
      g, "reduce_scatter", input, output, [op](Backend& b, const Tensor& in, const Tensor& out) {
        b.reduce_scatter(in.raw_data(), out.raw_data(), count(out), out.dtype(), op);
      });
}

void all_reduce(const Tensor& t, ReduceOp op) {
  all_reduce_async(t, op).wait();
}
void broadcast(const Tensor& t, int src) {
  broadcast_async(t, src).wait();
}
void all_gather(const Tensor& output, const Tensor& input) {
  all_gather_async(output, input).wait();
}
void reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  reduce_scatter_async(output, input, op).wait();
}

void Work::wait() {
  if (!state_) return;
  std::unique_lock lock(state_->mutex);
  // The backend's own timeout ends a collective first; this bound is for a backend that hangs.
  bool done = state_->done_cv.wait_for(lock, state_->timeout + std::chrono::seconds(30),
                                       [&] { return state_->done; });
  KILN_CHECK(done, "kiln::dist: {} did not finish within {} ms", state_->what,
             state_->timeout.count());
  KILN_CHECK(state_->error.empty(), "{}", state_->error);
  if (auto finish = std::exchange(state_->finish, nullptr)) {
    lock.unlock();
    finish();
  }
}

bool Work::completed() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mutex);
  return state_->done;
}

double Work::seconds() const {
  return std::chrono::duration<double>(ended() - started()).count();
}

std::chrono::steady_clock::time_point Work::started() const {
  if (!state_) return {};
  std::lock_guard lock(state_->mutex);
  return state_->started;
}

std::chrono::steady_clock::time_point Work::ended() const {
  if (!state_) return {};
  std::lock_guard lock(state_->mutex);
  return state_->ended;
}

}  // namespace kiln::dist
