// The virtual GPU's profiler (see profiler.h).
#include "runtime/cuda/virtual/profiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "runtime/cuda/virtual/thread.h"

namespace kiln::cuda::vgpu {
namespace {

struct ProfileLog {
  std::mutex mutex;
  std::vector<KernelProfile> profiles;
  int forced = -1;  // set_profiling: -1 unset (the environment decides), else 0 or 1
  bool from_env = [] {
    const char* v = std::getenv("KILN_PROFILE");
    return v && std::strcmp(v, "0") != 0 && *v;
  }();
  // KILN_PROFILE=1 prints the table when the process exits.
  ~ProfileLog() {
    if (from_env && !profiles.empty())
      std::fprintf(stderr, "kiln: virtual GPU profile (KILN_PROFILE=1)\n%s",
                   profile_table(profiles).c_str());
  }
};

ProfileLog& log() {
  static ProfileLog instance;
  return instance;
}

}  // namespace

double KernelProfile::modeled_h100_us() const {
  constexpr double kBytesPerUs = 3.35e6, kWarpInstructionsPerUs = 132 * 4 * 1980.0;
  constexpr double kLaunchUs = 3.0;
  double memory = static_cast<double>(dram_bytes()) / kBytesPerUs;
  double issue = static_cast<double>(thread_instructions) / 32.0 / kWarpInstructionsPerUs;
  return kLaunchUs + std::max(memory, issue);
}

void KernelProfile::add(const KernelProfile& p) {
  launches += p.launches;
  thread_instructions += p.thread_instructions;
  load_bytes += p.load_bytes, store_bytes += p.store_bytes;
  load_requests += p.load_requests, store_requests += p.store_requests;
  load_sectors += p.load_sectors, store_sectors += p.store_sectors;
  dram_load_sectors += p.dram_load_sectors, dram_store_sectors += p.dram_store_sectors;
  shared_requests += p.shared_requests, bank_conflicts += p.bank_conflicts;
  atomics += p.atomics, interpret_ms += p.interpret_ms;
}

void set_profiling(bool on) {
  log().forced = on ? 1 : 0;
}

bool profiling() {
  ProfileLog& l = log();
  return l.forced >= 0 ? l.forced == 1 : l.from_env;
}

const std::vector<KernelProfile>& profiles() {
  return log().profiles;
}

void clear_profiles() {
  std::lock_guard lock(log().mutex);
  log().profiles.clear();
}

void record_profile(KernelProfile p) {
  std::lock_guard lock(log().mutex);
  auto& all = log().profiles;
  // A long run (a training loop under KILN_PROFILE=1) keeps a bounded log: past the cap, a
  // launch is added into the first record of its kernel.
  constexpr std::size_t kMaxRecords = 1 << 16;
  if (all.size() >= kMaxRecords) {
    for (auto& q : all)
      if (q.kernel == p.kernel) {
        q.add(p);
        return;
      }
  }
  all.push_back(std::move(p));
}

std::string profile_table(const std::vector<KernelProfile>& profiles) {
  std::vector<std::string> order;
  std::map<std::string, std::pair<int, KernelProfile>> sums;
  for (const auto& p : profiles) {
    auto [it, fresh] = sums.try_emplace(p.kernel, 0, KernelProfile{});
    if (fresh) {
      order.push_back(p.kernel);
      it->second.second.kernel = p.kernel;
      it->second.second.launches = 0;
    }
    KernelProfile& s = it->second.second;
    it->second.first += static_cast<int>(p.launches);
    s.add(p);
  }
  auto ratio = [](std::uint64_t a, std::uint64_t b) { return b ? double(a) / double(b) : 0.0; };
  std::string out =
      fmt::format("{:<40} {:>6} {:>12} {:>9} {:>9} {:>9} {:>7} {:>7} {:>9} {:>8} {:>11} {:>10}\n",
                  "kernel", "calls", "thread-inst", "ld MB", "st MB", "DRAM MB", "sec/ld", "sec/st",
                  "bank-conf", "atomics", "H100 us*", "interp ms");
  for (const auto& name : order) {
    const auto& [calls, s] = sums.at(name);
    // The modeled time of the summed counters would pay one launch latency: add the others.
    double modeled = s.modeled_h100_us() + 3.0 * (calls - 1);
    out += fmt::format(
        "{:<40} {:>6} {:>12} {:>9.3f} {:>9.3f} {:>9.3f} {:>7.2f} {:>7.2f} {:>9} {:>8} {:>11.1f} "
        "{:>10.1f}\n",
        name.size() > 40 ? name.substr(0, 37) + "..." : name, calls, s.thread_instructions,
        s.load_bytes / 1e6, s.store_bytes / 1e6, s.dram_bytes() / 1e6,
        ratio(s.load_sectors, s.load_requests), ratio(s.store_sectors, s.store_requests),
        s.bank_conflicts, s.atomics, modeled, s.interpret_ms);
  }
  out +=
      "* modeled: 3 us launch + max(DRAM sectors / 3.35 TB/s, instruction issue), not measured\n";
  return out;
}

void profile_access(ThreadState& t, Space space, std::uint64_t addr, unsigned size, Access access) {
  bool shared = space == Space::shared;
  if (space == Space::generic) {
    if (addr - kSharedWindow < kWindowSize)
      shared = true, addr -= kSharedWindow;
    else if (addr >= kSharedWindow)
      return;  // local, param or constant
  } else if (space != Space::global && !shared) {
    return;
  }
  t.launch->profiler->access(t, shared, addr, size, access == Access::store,
                             access == Access::atomic);
}

LaunchProfiler::LaunchProfiler(std::uint32_t block_threads)
    : warps_((block_threads + 31) / 32),
      global_seq_(block_threads, 0),
      shared_seq_(block_threads, 0) {}

void LaunchProfiler::access(ThreadState& t, bool shared, std::uint64_t addr, unsigned size,
                            bool store, bool atomic) {
  if (atomic) ++p_.atomics;
  WarpRecords& w = warps_[t.warp];
  if (shared) {
    std::uint32_t seq = shared_seq_[t.linear]++;
    if (seq >= w.shared.size()) w.shared.resize(seq + 1);
    SharedRequest& r = w.shared[seq];
    if (r.count == 0) ++p_.shared_requests;
    for (std::uint64_t word = addr >> 2; word <= (addr + size - 1) >> 2 && r.count < 64; ++word)
      r.words[r.count++] = static_cast<std::uint32_t>(word);
    return;
  }
  (store ? p_.store_bytes : p_.load_bytes) += size;
  std::uint32_t seq = global_seq_[t.linear]++;
  if (seq >= w.global.size()) w.global.resize(seq + 1);
  GlobalRequest& r = w.global[seq];
  if (r.seen == 0) ++(store ? p_.store_requests : p_.load_requests);
  for (std::uint64_t sector = addr >> 5; sector <= (addr + size - 1) >> 5; ++sector) {
    if (sector == r.last) continue;
    r.last = sector;
    unsigned known = std::min<unsigned>(r.seen, 4);
    if (std::find(r.recent, r.recent + known, sector) != r.recent + known) continue;
    r.recent[r.next] = sector;
    r.next = (r.next + 1) % 4;
    r.seen = static_cast<std::uint8_t>(std::min(r.seen + 1, 255));
    ++(store ? p_.store_sectors : p_.load_sectors);
    if ((store ? stored_ : loaded_).insert(sector))
      ++(store ? p_.dram_store_sectors : p_.dram_load_sectors);
  }
}

bool LaunchProfiler::SectorSet::insert(std::uint64_t sector) {
  constexpr int kPageShift = 15;  // 2^15 sectors = 1 MiB
  std::uint64_t page = sector >> kPageShift;
  if (page != last_page_) {
    auto& bits = pages_[page];
    if (bits.empty()) bits.assign((1u << kPageShift) / 64, 0);
    last_page_ = page;
    last_ = &bits;
  }
  std::uint64_t i = sector & ((1u << kPageShift) - 1);
  std::uint64_t& word = (*last_)[i / 64];
  std::uint64_t bit = 1ull << (i % 64);
  bool fresh = !(word & bit);
  word |= bit;
  return fresh;
}

void LaunchProfiler::end_block() {
  for (auto& w : warps_) {
    for (const auto& r : w.shared) {
      if (r.count == 0) continue;
      // One wavefront per distinct word in the busiest bank.
      std::uint32_t words[64];
      std::copy(r.words, r.words + r.count, words);
      std::sort(words, words + r.count);
      std::uint8_t per_bank[32] = {};
      std::uint8_t worst = 0;
      for (std::uint8_t i = 0; i < r.count; ++i)
        if (i == 0 || words[i] != words[i - 1]) worst = std::max(worst, ++per_bank[words[i] % 32]);
      p_.bank_conflicts += worst - 1u;
    }
    w.global.clear();
    w.shared.clear();
  }
  std::fill(global_seq_.begin(), global_seq_.end(), 0);
  std::fill(shared_seq_.begin(), shared_seq_.end(), 0);
}

}  // namespace kiln::cuda::vgpu
