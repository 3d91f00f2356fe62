// The block scheduler (see launch.h).
#include "runtime/cuda/virtual/launch.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/cuda/virtual/collective.h"
#include "runtime/cuda/virtual/fault.h"
#include "runtime/cuda/virtual/global_check.h"
#include "runtime/cuda/virtual/profiler.h"
#include "runtime/cuda/virtual/shared_check.h"
#include "runtime/cuda/virtual/thread.h"

namespace kiln::cuda::vgpu {
namespace {

// The interpreter's inner loop: one thread until it exits or parks (or, with Sliced, has run
// `budget` instructions: the random schedule preempts it there).
template <bool Sliced>
void run_thread(ThreadState& t, std::uint64_t budget = 0) {
  // pc and code live in registers; only control instructions (kFlagMayStop) read or move them,
  // so they are synced around those calls alone.
  std::uint64_t count = 0;  // folded into t.icount when the thread stops
  std::uint64_t issue = 0;  // the same, weighted: folded into t.issue_quarters
  const Instr* code = t.code;
  std::uint32_t pc = t.pc;
  for (;;) {
    if constexpr (Sliced) {
      if (count == budget) {
        t.pc = pc;
        t.code = code;
        t.icount += count;
        t.issue_quarters += issue;
        return;
      }
    }
    const Instr& in = code[pc++];
    ++count;
    issue += in.cost;  // a predicated-off instruction is issued too
    if (in.guard != kNoGuard && ((t.r[in.guard] != 0) == in.guard_neg)) continue;
    if (!(in.flags & kFlagMayStop)) {
      in.fn(t, in);
      continue;
    }
    t.pc = pc;
    in.fn(t, in);
    if (t.status != Status::running) break;
    pc = t.pc;
    code = t.code;
  }
  t.icount += count;
  t.issue_quarters += issue;
  t.back_branches = 0;
}

std::string tid_str(const ThreadState& t) {
  return fmt::format("({},{},{})", t.tid[0], t.tid[1], t.tid[2]);
}

std::string instr_text(const ThreadState& t) {
  if (!t.wait || t.frames.empty()) return "?";
  const Function* fn = t.frames.back().fn;
  std::ptrdiff_t i = t.wait - fn->code.data();
  return fmt::format("'{}' (PTX line {})", fn->text[static_cast<std::size_t>(i)], t.wait->line);
}

std::string block_str(const BlockContext& b, const LaunchContext& l) {
  return fmt::format("kernel '{}' block ({},{},{})", l.kernel->name, b.ctaid.x, b.ctaid.y,
                     b.ctaid.z);
}

// splitmix64: a small seeded generator, the same on every platform.
struct Rng {
  std::uint64_t state;
  std::uint64_t operator()() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  std::uint64_t below(std::uint64_t n) { return (*this)() % n; }
};

class BlockRunner {
 public:
  BlockRunner(LaunchContext& l, std::vector<ThreadState>& threads, std::uint32_t n, Rng* rng)
      : l_(l), threads_(threads), n_(n), rng_(rng) {}

  void run(BlockContext& b) {
    b_ = &b;
    runnable_.clear();
    for (std::uint32_t i = 0; i < n_; ++i) runnable_.push_back(&threads_[i]);
    for (;;) {
      if (rng_)
        run_shuffled();
      else
        for (ThreadState* t : runnable_) run_thread<false>(*t);
      runnable_.clear();
      std::uint32_t exited = 0;
      for (std::uint32_t i = 0; i < n_; ++i) exited += threads_[i].status == Status::exited;
      if (exited == n_) return;
      release_barriers(exited);
      release_warps();
      if (runnable_.empty()) deadlock(exited);
    }
  }

 private:
  LaunchContext& l_;
  std::vector<ThreadState>& threads_;
  std::uint32_t n_;
  BlockContext* b_ = nullptr;
  std::vector<ThreadState*> runnable_;
  Rng* rng_;  // random schedule, else null

  // A random runnable thread runs a random slice of 1..32 instructions, until every one has
  // exited or parked at a collective: any interleaving between collectives may come up.
  void run_shuffled() {
    while (!runnable_.empty()) {
      std::size_t i = rng_->below(runnable_.size());
      ThreadState& t = *runnable_[i];
      run_thread<true>(t, 1 + rng_->below(32));
      if (t.status == Status::running) continue;
      runnable_[i] = runnable_.back();
      runnable_.pop_back();
    }
  }

  void release_barriers(std::uint32_t exited) {
    std::uint32_t waiting[16] = {};
    std::uint32_t count[16] = {};
    for (std::uint32_t i = 0; i < n_; ++i) {
      const ThreadState& t = threads_[i];
      if (t.status != Status::barrier) continue;
      ++waiting[t.bar_id];
      if (t.bar_count) count[t.bar_id] = t.bar_count;
    }
    for (std::uint32_t id = 0; id < 16; ++id) {
      if (!waiting[id]) continue;
      std::uint32_t expected = count[id] ? count[id] : n_;
      std::uint32_t arrived = waiting[id] + b_->bar_arrived[id];
      if (!count[id] && exited > 0) barrier_never_completes(id, waiting[id], exited);
      if (arrived < expected) continue;
      b_->bar_arrived[id] = 0;
      // bar.red results over the threads released together.
      std::uint32_t popc = 0;
      bool all = true, any = false;
      for (std::uint32_t i = 0; i < n_; ++i) {
        const ThreadState& t = threads_[i];
        if (t.status != Status::barrier || t.bar_id != id) continue;
        popc += t.bar_pred;
        all = all && t.bar_pred;
        any = any || t.bar_pred;
      }
      for (std::uint32_t i = 0; i < n_; ++i) {
        ThreadState& t = threads_[i];
        if (t.status != Status::barrier || t.bar_id != id) continue;
        if (t.wait->mod == kBarRed) {
          std::uint64_t v = t.wait->mod2 == 0 ? popc : t.wait->mod2 == 1 ? all : any;
          t.r[t.wait->d[0]] = v;
        }
        t.status = Status::running;
        t.wait = nullptr;
        if (b_->shadow) t.barrier_seen = b_->shadow->barrier_epoch + 1;
        runnable_.push_back(&t);
      }
      if (b_->shadow) ++b_->shadow->barrier_epoch;
    }
  }

  [[noreturn]] void barrier_never_completes(std::uint32_t id, std::uint32_t waiting,
                                            std::uint32_t exited) {
    const ThreadState* waiter = nullptr;
    const ThreadState* gone = nullptr;
    for (std::uint32_t i = 0; i < n_; ++i) {
      const ThreadState& t = threads_[i];
      if (!waiter && t.status == Status::barrier && t.bar_id == id) waiter = &t;
      if (!gone && t.status == Status::exited) gone = &t;
    }
    throw KernelFault(fmt::format(
        "barrier {} in {} can never complete: {} of {} threads wait at it (e.g. thread {} at {}) "
        "but {} threads exited without reaching it (e.g. thread {}); __syncthreads() must be "
        "reached by every thread of the block",
        id, block_str(*b_, l_), waiting, n_, tid_str(*waiter), instr_text(*waiter), exited,
        tid_str(*gone)));
  }

  void release_warps() {
    std::uint32_t nwarps = (n_ + 31) / 32;
    ThreadState* lanes[32];
    for (std::uint32_t w = 0; w < nwarps; ++w) {
      std::uint32_t exists = 0;
      for (std::uint32_t l = 0; l < 32; ++l) {
        std::uint32_t i = w * 32 + l;
        lanes[l] = i < n_ ? &threads_[i] : nullptr;
        if (lanes[l]) exists |= 1u << l;
      }
      std::uint32_t done = 0;
      for (std::uint32_t l = 0; l < 32; ++l) {
        ThreadState* t = lanes[l];
        if (!t || t->status != Status::warp_wait || (done >> l & 1)) continue;
        std::uint32_t group;
        WarpKind kind = warp_kind(*t->wait);
        if (kind == WarpKind::activemask) {
          group = 0;
          for (std::uint32_t j = 0; j < 32; ++j)
            if (lanes[j] && lanes[j]->status == Status::warp_wait && lanes[j]->wait == t->wait)
              group |= 1u << j;
        } else {
          group = t->wait_mask;
          // mma / ldmatrix name no mask: the whole warp, converged at this very instruction.
          bool whole = is_whole_warp(kind);
          if (!(group >> l & 1))
            fault(*t, *t->wait,
                  fmt::format("{} member mask {:#010x} does not include the "
                              "executing lane {}:",
                              warp_kind_name(kind), group, l));
          bool ready = true;
          for (std::uint32_t j = 0; j < 32 && ready; ++j) {
            if (!(group >> j & 1)) continue;
            if (!(exists >> j & 1))
              fault(*t, *t->wait,
                    whole ? fmt::format("{} needs all 32 lanes of the warp, but lane {} does not "
                                        "exist (the block has {} threads):",
                                        warp_kind_name(kind), j, n_)
                          : fmt::format("{} member mask {:#010x} names lane {}, which does "
                                        "not exist (the block has {} threads):",
                                        warp_kind_name(kind), group, j, n_));
            ThreadState* o = lanes[j];
            if (o->status == Status::exited)
              fault(*t, *t->wait,
                    whole ? fmt::format("{} needs all 32 lanes of the warp converged on it, but "
                                        "lane {} (thread {}) has exited and can never arrive "
                                        "(a divergent warp):",
                                        warp_kind_name(kind), j, tid_str(*o))
                          : fmt::format("{} member mask {:#010x} names lane {} (thread {}), "
                                        "which has exited and can never arrive:",
                                        warp_kind_name(kind), group, j, tid_str(*o)));
            ready = o->status == Status::warp_wait && o->wait_mask == group &&
                    warp_kind(*o->wait) == kind && (!whole || o->wait == t->wait);
          }
          if (!ready) continue;
        }
        execute_warp_group(lanes, group);
        done |= group;
        if (b_->shadow) {
          std::uint32_t epoch = ++b_->shadow->warp_epoch[w];
          for (std::uint32_t j = 0; j < 32; ++j)
            if (group >> j & 1) lanes[j]->warp_seen = epoch;
        }
        for (std::uint32_t j = 0; j < 32; ++j)
          if (group >> j & 1) {
            lanes[j]->status = Status::running;
            lanes[j]->wait = nullptr;
            runnable_.push_back(lanes[j]);
          }
      }
    }
  }

  [[noreturn]] void deadlock(std::uint32_t exited) {
    // Explain the first stuck warp collective precisely, else summarize who waits where.
    for (std::uint32_t i = 0; i < n_; ++i) {
      const ThreadState& t = threads_[i];
      if (t.status != Status::warp_wait || warp_kind(*t.wait) == WarpKind::activemask) continue;
      std::uint32_t base = i / 32 * 32;
      for (std::uint32_t j = 0; j < 32; ++j) {
        if (!(t.wait_mask >> j & 1) || base + j >= n_) continue;
        const ThreadState& o = threads_[base + j];
        bool whole = is_whole_warp(warp_kind(*t.wait));
        if (o.status == Status::warp_wait && o.wait_mask == t.wait_mask &&
            warp_kind(*o.wait) == warp_kind(*t.wait) && (!whole || o.wait == t.wait))
          continue;
        std::string other =
            o.status == Status::barrier
                ? fmt::format("waits at barrier {} {}", o.bar_id, instr_text(o))
            : whole && o.wait_mask == t.wait_mask && warp_kind(*o.wait) == warp_kind(*t.wait)
                ? fmt::format(
                      "waits at another {} instruction {} (.aligned: the whole warp "
                      "must execute the same one)",
                      warp_kind_name(warp_kind(*o.wait)), instr_text(o))
                : fmt::format("waits at {} {} with member mask {:#010x}",
                              warp_kind_name(warp_kind(*o.wait)), instr_text(o), o.wait_mask);
        throw KernelFault(fmt::format(
            "deadlock in {}: thread {} waits at {} {} with member mask {:#010x}, but lane {} "
            "(thread {}) {} and can never arrive",
            block_str(*b_, l_), tid_str(t), warp_kind_name(warp_kind(*t.wait)), instr_text(t),
            t.wait_mask, j, tid_str(o), other));
      }
    }
    std::string s;
    std::uint32_t i = 0;
    while (i < n_) {
      const ThreadState& t = threads_[i];
      std::uint32_t j = i + 1;
      while (j < n_ && threads_[j].status == t.status && threads_[j].wait == t.wait) ++j;
      if (t.status == Status::barrier)
        s += fmt::format("; threads {}..{} wait at barrier {} {}", tid_str(t),
                         tid_str(threads_[j - 1]), t.bar_id, instr_text(t));
      else if (t.status == Status::warp_wait)
        s += fmt::format("; threads {}..{} wait at {}", tid_str(t), tid_str(threads_[j - 1]),
                         instr_text(t));
      i = j;
    }
    throw KernelFault(fmt::format("deadlock in {}: no thread can make progress ({} exited){}",
                                  block_str(*b_, l_), exited, s));
  }
};

}  // namespace

Schedule schedule_from_env() {
  Schedule s;
  const char* v = std::getenv("KILN_VGPU_SCHEDULE");
  if (!v || !*v) return s;
  std::string_view text(v);
  if (text == "in_order") return s;
  if (text.starts_with("random:") && text.size() > 7) {
    char* end = nullptr;
    s.seed = std::strtoull(v + 7, &end, 10);
    if (end && *end == 0) {
      s.random = true;
      return s;
    }
  }
  throw Error(
      fmt::format("KILN_VGPU_SCHEDULE: '{}' is not in_order or random:SEED (a decimal "
                  "number)",
                  text));
}

LaunchStats run_launch(const LaunchRequest& rq) {
  const Function& k = *rq.kernel;
  LaunchContext l;
  l.program = rq.program;
  l.kernel = &k;
  l.memory = rq.memory;
  l.grid = rq.grid;
  l.block = rq.block;
  l.dynamic_shared = rq.dynamic_shared;
  l.const_bank = rq.program->const_bank.data();
  l.const_bytes = rq.program->const_bank.size();
  Checks checks = checks_from_env();
  l.check_race = checks.race;
  l.check_init = checks.init;
  auto started = std::chrono::steady_clock::now();
  std::optional<LaunchProfiler> profiler;
  if (profiling()) l.profiler = &profiler.emplace(rq.block.x * rq.block.y * rq.block.z);
  std::uint64_t grid_blocks = std::uint64_t{rq.grid.x} * rq.grid.y * rq.grid.z;
  GlobalCheckState global;
  if (checks.any()) {
    if (checks.race) {
      global.first_serial = rq.memory->reserve_blocks(grid_blocks);
      global.block_fences.assign(grid_blocks, 0);
    }
    l.global = &global;
  }
  // Stores of a launch without initcheck are not tracked: nothing can be called uninitialized.
  if (!checks.init) rq.memory->forget_init();
  Schedule schedule = schedule_from_env();
  Rng seeded{schedule.seed ^ std::hash<std::string>{}(k.name)};
  Rng* rng = schedule.random ? &seeded : nullptr;
  // Kernel parameters, laid out as the PTX declares them.
  std::vector<std::uint8_t> params(std::max<std::uint64_t>(k.param_bytes, 1));
  if (!k.params.empty())
    KILN_CHECK_AS(LaunchError, rq.params != nullptr,
                  "launch of kernel '{}': it takes {} parameters but params is null", k.name,
                  k.params.size());
  for (std::size_t i = 0; i < k.params.size(); ++i) {
    KILN_CHECK_AS(LaunchError, rq.params[i] != nullptr, "launch of kernel '{}': params[{}] is null",
                  k.name, i);
    std::memcpy(params.data() + k.params[i].offset, rq.params[i], k.params[i].size);
  }
  l.params = params.data();
  l.param_bytes = k.param_bytes;

  std::uint64_t align = std::max<std::uint64_t>(rq.program->extern_shared_align, 16);
  std::uint64_t dyn_base = (k.static_shared_extent + align - 1) / align * align;
  std::uint32_t n = rq.block.x * rq.block.y * rq.block.z;
  std::vector<ThreadState> threads(n);
  BlockContext b;
  b.shared_bytes = dyn_base + rq.dynamic_shared;
  b.shared.assign(std::max<std::uint64_t>(b.shared_bytes, 1), 0);
  BlockRunner runner(l, threads, n, rng);
  SharedShadow shadow;
  LaunchStats stats;
  std::uint32_t nwarps = (n + 31) / 32;
  // Per-thread special registers that do not change from block to block.
  for (std::uint32_t i = 0; i < n; ++i) {
    ThreadState& t = threads[i];
    t.block = &b;
    t.launch = &l;
    t.tid[0] = i % rq.block.x;
    t.tid[1] = (i / rq.block.x) % rq.block.y;
    t.tid[2] = i / (rq.block.x * rq.block.y);
    t.linear = i;
    t.lane = i % 32;
    t.warp = i / 32;
    std::uint64_t* f = t.fixed;
    f[kSlotZero] = 0;
    f[kSlotTidX] = t.tid[0], f[kSlotTidY] = t.tid[1], f[kSlotTidZ] = t.tid[2];
    f[kSlotNtidX] = rq.block.x, f[kSlotNtidY] = rq.block.y, f[kSlotNtidZ] = rq.block.z;
    f[kSlotNctaidX] = rq.grid.x, f[kSlotNctaidY] = rq.grid.y, f[kSlotNctaidZ] = rq.grid.z;
    f[kSlotLaneId] = t.lane, f[kSlotWarpId] = t.warp, f[kSlotNWarpId] = nwarps;
    f[kSlotNSmId] = static_cast<std::uint64_t>(rq.sm_count);
    f[kSlotGridId] = 1;
    std::uint32_t bit = 1u << t.lane;
    f[kSlotLanemaskEq] = bit;
    f[kSlotLanemaskLt] = bit - 1;
    f[kSlotLanemaskLe] = (bit - 1) | bit;
    f[kSlotLanemaskGe] = ~(bit - 1);
    f[kSlotLanemaskGt] = ~((bit - 1) | bit);
    f[kSlotDynSmem] = rq.dynamic_shared;
    f[kSlotTotalSmem] = b.shared_bytes;
    f[kSlotDynSmemBase] = dyn_base;
    f[kSlotSink] = 0;
  }
  // Blocks run one after another, in linear order or (random schedule) a seeded shuffle.
  std::vector<std::uint32_t> order;
  if (rng) {
    order.resize(grid_blocks);
    std::iota(order.begin(), order.end(), 0u);
    for (std::uint64_t i = grid_blocks; i > 1; --i) std::swap(order[i - 1], order[rng->below(i)]);
  }
  for (std::uint64_t i = 0; i < grid_blocks; ++i) {
    auto linear = static_cast<std::uint32_t>(rng ? order[i] : i);
    unsigned bx = linear % rq.grid.x, by = linear / rq.grid.x % rq.grid.y,
             bz = linear / (rq.grid.x * rq.grid.y);
    b.ctaid = Dim3{bx, by, bz};
    b.linear = linear;
    b.fences = b.sync_ops = 0;
    global.current_serial = global.first_serial + linear;
    std::memset(b.bar_arrived, 0, sizeof(b.bar_arrived));
    // Shared memory is uninitialized on hardware; zero it so runs are reproducible.
    std::memset(b.shared.data(), 0, b.shared.size());
    if (checks.any()) {
      shadow.reset(b.shared_bytes, nwarps);
      b.shadow = &shadow;
    }
    std::uint64_t sm = linear % static_cast<std::uint64_t>(rq.sm_count);
    for (std::uint32_t j = 0; j < n; ++j) {
      ThreadState& t = threads[j];
      t.status = Status::running;
      t.wait = nullptr;
      t.carry = false;
      t.clock_reads = 0;
      t.frames.clear();
      t.local_top = 0;
      t.param_top = 0;
      t.barrier_seen = t.warp_seen = 0;
      std::uint64_t* f = t.fixed;
      f[kSlotCtaidX] = bx, f[kSlotCtaidY] = by, f[kSlotCtaidZ] = bz;
      f[kSlotSmId] = sm;
      enter_frame(t, k, 0, nullptr, kParamStackBase);
    }
    runner.run(b);
    if (checks.race) global.block_fences[linear] = b.fences;
    for (std::uint32_t j = 0; j < n; ++j) {
      stats.thread_instructions += threads[j].icount;
      l.clock += threads[j].icount;
      threads[j].icount = 0;
      stats.issue_quarters += threads[j].issue_quarters;
      threads[j].issue_quarters = 0;
    }
    if (profiler) profiler->end_block();
  }
  if (profiler) {
    KernelProfile& p = profiler->result();
    p.kernel = k.name;
    p.grid = rq.grid;
    p.block = rq.block;
    p.thread_instructions = stats.thread_instructions;
    p.issue_quarters = stats.issue_quarters;
    p.interpret_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
            .count();
    record_profile(std::move(p));
  }
  return stats;
}

}  // namespace kiln::cuda::vgpu
