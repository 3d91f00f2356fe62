// The virtual GPU's profiler (see profiler.h).
#include "runtime/cuda/virtual/profiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
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

// 132 SMs x 4 schedulers x 32 lanes at 1.98 GHz: weighted issue slots per microsecond.
constexpr double kIssueSlotsPerUs = 132 * 128 * 1980.0;
constexpr double kLaunchUs = 3.0;

double KernelProfile::memory_us() const {
  return static_cast<double>(dram_bytes()) / (kModeledDramBytesPerSecond / 1e6);
}

double KernelProfile::issue_us() const {
  return issue_slots() / kIssueSlotsPerUs;
}

double KernelProfile::tensor_us() const {
  return static_cast<double>(mma_flops_f16) / (kModeledTensorF16FlopsPerSecond / 1e6) +
         static_cast<double>(mma_flops_tf32) / (kModeledTensorTf32FlopsPerSecond / 1e6);
}

KernelProfile::Bound KernelProfile::bound() const {
  double m = memory_us(), i = issue_us(), t = tensor_us();
  if (t > m && t > i) return Bound::tensor;
  return i > m ? Bound::issue : Bound::memory;
}

double KernelProfile::modeled_h100_us() const {
  return kLaunchUs + std::max({memory_us(), issue_us(), tensor_us()});
}

const char* bound_name(KernelProfile::Bound bound) {
  switch (bound) {
    case KernelProfile::Bound::memory:
      return "memory";
    case KernelProfile::Bound::issue:
      return "issue";
    case KernelProfile::Bound::tensor:
      return "tensor";
  }
  return "?";
}

void KernelProfile::add(const KernelProfile& p) {
  launches += p.launches;
  thread_instructions += p.thread_instructions;
  issue_quarters += p.issue_quarters;
  load_bytes += p.load_bytes, store_bytes += p.store_bytes;
  load_requests += p.load_requests, store_requests += p.store_requests;
  load_sectors += p.load_sectors, store_sectors += p.store_sectors;
  dram_load_sectors += p.dram_load_sectors, dram_store_sectors += p.dram_store_sectors;
  shared_requests += p.shared_requests, bank_conflicts += p.bank_conflicts;
  atomics += p.atomics, interpret_ms += p.interpret_ms;
  mma_instructions += p.mma_instructions;
  mma_flops_f16 += p.mma_flops_f16, mma_flops_tf32 += p.mma_flops_tf32;
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
  std::string out = fmt::format(
      "{:<40} {:>6} {:>12} {:>8} {:>10} {:>9} {:>9} {:>9} {:>7} {:>7} {:>9} {:>8} {:>11} {:>7} "
      "{:>10}\n",
      "kernel", "calls", "thread-inst", "slots/B", "mma", "ld MB", "st MB", "DRAM MB", "sec/ld",
      "sec/st", "bank-conf", "atomics", "H100 us*", "bound", "interp ms");
  for (const auto& name : order) {
    const auto& [calls, s] = sums.at(name);
    // The modeled time of the summed counters would pay one launch latency: add the others.
    double modeled = s.modeled_h100_us() + 3.0 * (calls - 1);
    out += fmt::format(
        "{:<40} {:>6} {:>12} {:>8.2f} {:>10} {:>9.3f} {:>9.3f} {:>9.3f} {:>7.2f} {:>7.2f} {:>9} "
        "{:>8} {:>11.1f} {:>7} {:>10.1f}\n",
        name.size() > 40 ? name.substr(0, 37) + "..." : name, calls, s.thread_instructions,
        s.dram_bytes() ? s.issue_slots() / static_cast<double>(s.dram_bytes()) : 0.0,
        s.mma_instructions, s.load_bytes / 1e6, s.store_bytes / 1e6, s.dram_bytes() / 1e6,
        ratio(s.load_sectors, s.load_requests), ratio(s.store_sectors, s.store_requests),
        s.bank_conflicts, s.atomics, modeled, bound_name(s.bound()), s.interpret_ms);
  }
  out +=
      "slots/B: issue slots (instructions weighted by their H100 cost, issue_cost.h) per DRAM "
      "byte; ~10 is the break-even\n"
      "mma: warp-level tensor-core instructions (mma.sync)\n"
      "* modeled: 3 us launch + max(DRAM sectors / 3.35 TB/s, weighted issue slots / 33.5 T/s, "
      "tensor-core flops / 989.4 TFLOP/s f16 and bf16, 494.7 tf32), not measured; bound: the "
      "term it comes from\n";
  return out;
}

// A lane's n-th access is its warp's n-th request; most lanes extend the run of the lane before,
// and their bytes are counted with the run's.
void profile_global_access(ThreadState& t, std::uint64_t addr, unsigned size, Access access) {
  LaunchProfiler& p = *t.launch->profiler;
  bool store = access == Access::store;
  p.p_.atomics += access == Access::atomic;
  std::uint32_t seq = p.global_seq_[t.linear]++;
  std::vector<LaunchProfiler::GlobalRequest>& requests = p.warps_[t.warp].global;
  if (seq < requests.size() && requests[seq].end == addr && requests[seq].store == store)
      [[likely]] {
    requests[seq].end += size;
    return;
  }
  p.global_request(requests, seq, addr, size, store);
}

void profile_shared_access(ThreadState& t, std::uint64_t offset, unsigned size, Access access) {
  LaunchProfiler& p = *t.launch->profiler;
  p.p_.atomics += access == Access::atomic;
  auto begin = static_cast<std::uint32_t>(offset >> 2);
  auto end = static_cast<std::uint32_t>(((offset + size - 1) >> 2) + 1);
  std::uint32_t seq = p.shared_seq_[t.linear]++;
  std::vector<LaunchProfiler::SharedRequest>& requests = p.warps_[t.warp].shared;
  if (seq < requests.size() && requests[seq].end == begin &&
      requests[seq].listed == LaunchProfiler::kNotListed) [[likely]] {
    requests[seq].end = end;
    return;
  }
  p.shared_request(requests, seq, begin, end);
}

void profile_shared_skip(ThreadState& t) {
  LaunchProfiler& p = *t.launch->profiler;
  // A lane's count never passes its warp's requests (the next one it opens is the next index).
  std::uint32_t& seq = p.shared_seq_[t.linear];
  if (seq < p.warps_[t.warp].shared.size()) ++seq;
}

LaunchProfiler::LaunchProfiler(std::uint32_t block_threads)
    : warps_((block_threads + 31) / 32),
      global_seq_(block_threads, 0),
      shared_seq_(block_threads, 0) {}

void LaunchProfiler::global_request(std::vector<GlobalRequest>& requests, std::uint32_t seq,
                                    std::uint64_t addr, unsigned size, bool store) {
  if (seq == requests.size()) {
    ++(store ? p_.store_requests : p_.load_requests);
    requests.push_back(GlobalRequest{.begin = addr, .end = addr + size, .store = store});
    return;
  }
  GlobalRequest& r = requests[seq];
  if (addr >= r.begin && addr + size <= r.end && store == r.store) {
    (store ? p_.store_bytes : p_.load_bytes) += size;  // a lane inside the run
    return;
  }
  count_sectors(r);
  r.begin = addr;
  r.end = addr + size;
  r.store = store;
}

void LaunchProfiler::count_sectors(GlobalRequest& r) {
  (r.store ? p_.store_bytes : p_.load_bytes) += r.end - r.begin;
  std::uint64_t first = r.begin >> 5, last = (r.end - 1) >> 5;
  if (r.seen == 0) {
    // The request's first run: every sector in it is new to the request. Counted at once, and
    // remembered as the loop below would have left them.
    std::uint64_t n = last - first + 1;
    for (std::uint64_t i = n > 4 ? n - 4 : 0; i < n; ++i) r.recent[i % 4] = first + i;
    r.next = static_cast<std::uint8_t>(n % 4);
    r.seen = static_cast<std::uint8_t>(std::min<std::uint64_t>(n, 255));
    r.last = last;
    (r.store ? p_.store_sectors : p_.load_sectors) += n;
    (r.store ? p_.dram_store_sectors : p_.dram_load_sectors) +=
        (r.store ? stored_ : loaded_).insert_range(first, last);
    return;
  }
  for (std::uint64_t sector = first; sector <= last; ++sector) {
    if (sector == r.last) continue;
    r.last = sector;
    unsigned known = std::min<unsigned>(r.seen, 4);
    if (std::find(r.recent, r.recent + known, sector) != r.recent + known) continue;
    r.recent[r.next] = sector;
    r.next = (r.next + 1) % 4;
    r.seen = static_cast<std::uint8_t>(std::min(r.seen + 1, 255));
    ++(r.store ? p_.store_sectors : p_.load_sectors);
    if ((r.store ? stored_ : loaded_).insert(sector))
      ++(r.store ? p_.dram_store_sectors : p_.dram_load_sectors);
  }
}

void LaunchProfiler::shared_request(std::vector<SharedRequest>& requests, std::uint32_t seq,
                                    std::uint32_t begin, std::uint32_t end) {
  if (seq == requests.size()) {
    ++p_.shared_requests;
    requests.push_back(SharedRequest{.begin = begin, .end = end});
    return;
  }
  SharedRequest& r = requests[seq];
  if (r.listed == kNotListed) {
    if (begin >= r.begin && end <= r.end) return;
    r.listed = static_cast<std::uint32_t>(lists_.size());
    list_words(lists_.emplace_back(), r.begin, r.end);
  }
  list_words(lists_[r.listed], begin, end);
}

void LaunchProfiler::list_words(WordList& list, std::uint32_t begin, std::uint32_t end) {
  for (std::uint32_t word = begin; word < end && list.count < WordList::kCapacity; ++word)
    list.words[list.count++] = word;
}

std::vector<std::uint64_t>& LaunchProfiler::SectorSet::page(std::uint64_t index) {
  if (index != last_page_) {
    auto& bits = pages_[index];
    if (bits.empty()) bits.assign((1u << kPageShift) / 64, 0);
    last_page_ = index;
    last_ = &bits;
  }
  return *last_;
}

bool LaunchProfiler::SectorSet::insert(std::uint64_t sector) {
  std::uint64_t i = sector & ((1u << kPageShift) - 1);
  std::uint64_t& word = page(sector >> kPageShift)[i / 64];
  std::uint64_t bit = 1ull << (i % 64);
  bool fresh = !(word & bit);
  word |= bit;
  return fresh;
}

std::uint64_t LaunchProfiler::SectorSet::insert_range(std::uint64_t first, std::uint64_t last) {
  std::uint64_t fresh = 0;
  while (first <= last) {
    // The bits of [first, last] in first's 64-sector word.
    std::uint64_t i = first & ((1u << kPageShift) - 1);
    std::uint64_t count = std::min<std::uint64_t>(64 - i % 64, last - first + 1);
    std::uint64_t mask = (count == 64 ? ~0ull : ((1ull << count) - 1)) << (i % 64);
    std::uint64_t& word = page(first >> kPageShift)[i / 64];
    fresh += static_cast<std::uint64_t>(std::popcount(mask & ~word));
    word |= mask;
    first += count;
  }
  return fresh;
}

void LaunchProfiler::end_block() {
  for (auto& w : warps_) {
    for (auto& r : w.global) count_sectors(r);
    for (const auto& r : w.shared) {
      // One wavefront per distinct word in the busiest bank. A run of n words puts ceil(n / 32)
      // of them in its busiest bank.
      if (r.listed == kNotListed) {
        p_.bank_conflicts += (r.end - r.begin + 31) / 32 - 1;
        continue;
      }
      WordList& list = lists_[r.listed];
      std::sort(list.words, list.words + list.count);
      unsigned per_bank[32] = {};
      unsigned worst = 0;
      for (unsigned i = 0; i < list.count; ++i)
        if (i == 0 || list.words[i] != list.words[i - 1])
          worst = std::max(worst, ++per_bank[list.words[i] % 32]);
      p_.bank_conflicts += worst - 1u;
    }
    w.global.clear();
    w.shared.clear();
  }
  lists_.clear();
  std::fill(global_seq_.begin(), global_seq_.end(), 0);
  std::fill(shared_seq_.begin(), shared_seq_.end(), 0);
}

}  // namespace kiln::cuda::vgpu
