// Global- and local-memory racecheck and initcheck (see global_check.h).
#include "runtime/cuda/virtual/global_check.h"

#include <fmt/format.h>

#include <cstring>
#include <string>

#include "runtime/cuda/virtual/fault.h"

namespace kiln::cuda::vgpu {
namespace {

constexpr std::uint8_t kLoad = 1, kStore = 2;

std::string block_str(const LaunchContext& l, std::uint32_t linear) {
  return fmt::format("({},{},{})", linear % l.grid.x, (linear / l.grid.x) % l.grid.y,
                     linear / (l.grid.x * l.grid.y));
}

std::string thread_str(const LaunchContext& l, std::uint32_t linear) {
  return fmt::format("({},{},{})", linear % l.block.x, (linear / l.block.x) % l.block.y,
                     linear / (l.block.x * l.block.y));
}

// "PTX line 12 (st.global.f32 [%rd4], %f1;)": records keep the line alone, the text is found
// again only when a report is made.
std::string line_str(const Program& p, std::uint32_t line) {
  for (const auto& f : p.functions)
    for (std::size_t i = 0; i < f->code.size() && i < f->text.size(); ++i)
      if (f->code[i].line == line) return fmt::format("PTX line {} ({})", line, f->text[i]);
  return fmt::format("PTX line {}", line);
}

// "0x7f.. (offset 16 in allocation 0x7f..[1024 bytes])"
std::string location(const ThreadState& t, std::uint64_t addr, std::uint64_t base) {
  const Allocation* a = t.launch->memory->find(base, 1);
  if (!a) return hex(addr);
  return fmt::format("{} (offset {} in allocation {}[{} bytes]{})", hex(addr), addr - base,
                     hex(base), a->size, a->label.empty() ? "" : " '" + a->label + "'");
}

// Whether `e`, recorded earlier in this launch (or in an earlier one), is ordered before the
// access `t` makes now: see the rules in global_check.h.
bool ordered(const ThreadState& t, const GlobalCheckState& g, const GlobalAccess& e) {
  if (e.block < g.first_serial) return true;  // nothing recorded, or an earlier launch
  const BlockContext& b = *t.block;
  if (e.block == g.current_serial) {
    if (e.thread == t.linear || e.thread / 32 == t.warp) return true;
    return e.epoch < t.barrier_seen || e.fences < b.fences;
  }
  return e.fences < g.block_fences[e.block - g.first_serial] && b.sync_ops > 0;
}

[[noreturn]] void hazard(const ThreadState& t, const Instr& in, std::uint64_t addr,
                         std::uint64_t base, const char* kind, const GlobalAccess& other) {
  const LaunchContext& l = *t.launch;
  const GlobalCheckState& g = *l.global;
  bool same_block = other.block == g.current_serial;
  std::string why =
      same_block ? fmt::format("with no barrier between them (barriers passed: {} and {})",
                               t.barrier_seen, other.epoch)
                 : std::string(
                       "and different blocks of one launch are unordered (only atomics, or a "
                       "fence then a flag, may pass data between blocks)");
  throw KernelFault(fmt::format(
      "racecheck: {} hazard on global memory at {} {}: this thread {} what block {} thread {} "
      "{} at {}, {}",
      kind, location(t, addr, base), where(t, &in), kind[0] == 'W' ? "writes" : "reads",
      block_str(l, other.block - g.first_serial), thread_str(l, other.thread),
      other.kind == kStore ? "wrote" : "read", line_str(*l.program, other.line), why));
}

}  // namespace

void AllocShadow::mark_init(std::uint64_t offset, std::uint64_t bytes) {
  std::uint64_t i = offset, end = offset + bytes;
  for (; i < end && (i & 63); ++i) init[i >> 6] |= 1ull << (i & 63);
  for (; i + 64 <= end; i += 64) init[i >> 6] = ~0ull;
  for (; i < end; ++i) init[i >> 6] |= 1ull << (i & 63);
}

std::uint64_t AllocShadow::first_uninit(std::uint64_t offset, std::uint64_t bytes) const {
  for (std::uint64_t i = offset; i < offset + bytes; ++i)
    if (!(init[i >> 6] >> (i & 63) & 1)) return i;
  return ~0ull;
}

void check_global_access(ThreadState& t, const Instr& in, std::uint64_t addr, unsigned size,
                         Access access, std::uint64_t base, AllocShadow* s) {
  LaunchContext& l = *t.launch;
  std::uint64_t off = addr - base;
  if (l.check_init && !s->init.empty()) {
    if (access != Access::store) {
      std::uint64_t bad = s->first_uninit(off, size);
      if (bad != ~0ull)
        throw KernelFault(fmt::format(
            "initcheck: {} of uninitialized global memory at {} {}: byte {} of the {} bytes "
            "read was never written (device allocations start uninitialized; copies, memsets "
            "and kernel stores initialize them)",
            access == Access::atomic ? "atomic" : "read", location(t, addr, base), where(t, &in),
            bad - off, size));
    }
    if (access != Access::load) s->mark_init(off, size);
  }
  if (!l.check_race) return;
  BlockContext& b = *t.block;
  if (access == Access::atomic || (in.flags & kFlagSyncAccess)) {
    ++b.sync_ops;
    return;
  }
  if (!s->race) {
    const Allocation* a = l.memory->find(base, 1);
    s->granules = ((a ? a->size : off + size) + 3) / 4;
    s->race.reset(static_cast<GlobalGranule*>(std::calloc(s->granules, sizeof(GlobalGranule))));
    KILN_CHECK(s->race != nullptr, "virtual GPU racecheck: out of memory for the shadow of {}",
               location(t, addr, base));
  }
  const GlobalCheckState& g = *l.global;
  GlobalAccess me{g.current_serial,
                  in.line,
                  t.barrier_seen,
                  b.fences,
                  static_cast<std::uint16_t>(t.linear),
                  0,
                  access == Access::load ? kLoad : kStore};
  auto mine = [&](const GlobalAccess& e) { return e.block == me.block && e.thread == me.thread; };
  for (std::uint64_t gi = off >> 2, last = (off + size - 1) >> 2; gi <= last; ++gi) {
    std::uint64_t lo = std::max(off, gi * 4), hi = std::min(off + size, gi * 4 + 4);
    me.mask = static_cast<std::uint8_t>(((1u << (hi - lo)) - 1) << (lo - gi * 4));
    GlobalGranule& gr = s->race[gi];
    auto conflicts = [&](const GlobalAccess& e) { return (e.mask & me.mask) && !ordered(t, g, e); };
    if (me.kind == kLoad) {
      if (conflicts(gr.writer)) hazard(t, in, addr, base, "RAW", gr.writer);
      if (mine(gr.reader)) {
        std::uint8_t m = gr.reader.mask | me.mask;
        gr.reader = me;
        gr.reader.mask = m;
      } else {
        // Two readers from different threads, so a later write by one still sees the other.
        if (gr.reader.block >= g.first_serial) gr.other_reader = gr.reader;
        gr.reader = me;
      }
      continue;
    }
    if (conflicts(gr.writer)) hazard(t, in, addr, base, "WAW", gr.writer);
    if (conflicts(gr.reader)) hazard(t, in, addr, base, "WAR", gr.reader);
    if (conflicts(gr.other_reader)) hazard(t, in, addr, base, "WAR", gr.other_reader);
    std::uint8_t m = mine(gr.writer) ? gr.writer.mask | me.mask : me.mask;
    gr.writer = me;
    gr.writer.mask = m;
    // Reads this write covers are ordered before it; forget them.
    if (!(gr.reader.mask & ~me.mask)) gr.reader = {};
    if (!(gr.other_reader.mask & ~me.mask)) gr.other_reader = {};
  }
}

void check_local_access(ThreadState& t, const Instr& in, std::uint64_t offset, unsigned size,
                        Access access) {
  if (t.local_init.size() < t.local.size()) t.local_init.resize(t.local.size(), 1);
  std::uint8_t* w = t.local_init.data() + offset;
  if (access == Access::load) {
    for (unsigned i = 0; i < size; ++i)
      if (!w[i])
        throw KernelFault(fmt::format(
            "initcheck: read of uninitialized local memory at offset {} {}: byte {} of the {} "
            "bytes read was never written in this frame",
            offset, where(t, &in), i, size));
    return;
  }
  std::memset(w, 1, size);
}

}  // namespace kiln::cuda::vgpu
