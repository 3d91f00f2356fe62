// Shared-memory racecheck and initcheck (see shared_check.h).
#include "runtime/cuda/virtual/shared_check.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/cuda/virtual/fault.h"

namespace kiln::cuda::vgpu {
namespace {

std::string thread_str(const LaunchContext& l, std::uint32_t linear) {
  return fmt::format("({},{},{})", linear % l.block.x, (linear / l.block.x) % l.block.y,
                     linear / (l.block.x * l.block.y));
}

std::string instr_str(const SharedAccess& a) {
  if (!a.fn || !a.instr) return "?";
  std::ptrdiff_t i = a.instr - a.fn->code.data();
  if (i < 0 || static_cast<std::size_t>(i) >= a.fn->text.size())
    return fmt::format("PTX line {}", a.instr->line);
  return fmt::format("PTX line {} ({})", a.instr->line, a.fn->text[static_cast<std::size_t>(i)]);
}

// Whether `earlier` happens before the access `t` makes now: the same thread, or a barrier or
// (within a warp) a warp synchronization both took part in lies between them.
bool ordered(const ThreadState& t, const SharedAccess& earlier) {
  if (earlier.thread == SharedAccess::kNone || earlier.thread == t.linear) return true;
  if (earlier.barrier_epoch < t.barrier_seen) return true;
  return earlier.thread / 32 == t.warp && earlier.warp_epoch < t.warp_seen;
}

[[noreturn]] void hazard(const ThreadState& t, const Instr& in, std::uint64_t offset,
                         const char* kind, const char* now, const char* then,
                         const SharedAccess& other) {
  throw KernelFault(fmt::format(
      "racecheck: {} hazard on shared memory at offset {} {}: this thread {} what thread {} "
      "{} at {}, with no barrier (or, within a warp, no warp synchronization) between them "
      "(barriers passed: {} and {})",
      kind, offset, where(t, &in), now, thread_str(*t.launch, other.thread), then, instr_str(other),
      t.barrier_seen, other.barrier_epoch));
}

}  // namespace

Checks checks_from_env() {
  Checks c;
  const char* v = std::getenv("KILN_VGPU_CHECK");
  if (!v) return c;
  std::string_view s(v);
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t end = s.find(',', start);
    if (end == std::string_view::npos) end = s.size();
    std::string_view item = s.substr(start, end - start);
    if (item == "race")
      c.race = true;
    else if (item == "init")
      c.init = true;
    else if (item == "all")
      c.race = c.init = true;
    else if (item == "none")
      c = {};
    else if (!item.empty())
      throw Error(fmt::format("KILN_VGPU_CHECK: unknown check '{}' (race, init, all, none)", item));
    start = end + 1;
  }
  return c;
}

void SharedShadow::reset(std::uint64_t bytes, std::uint32_t warps) {
  writer.assign(bytes, {});
  reader.assign(bytes, {});
  other_reader.assign(bytes, {});
  written.assign(bytes, 0);
  warp_epoch.assign(warps, 0);
  barrier_epoch = 0;
}

void check_shared_access(ThreadState& t, const Instr& in, std::uint64_t offset, unsigned size,
                         Access access) {
  SharedShadow& s = *t.block->shadow;
  const LaunchContext& l = *t.launch;
  SharedAccess me{t.linear, t.barrier_seen, t.warp_seen, &in,
                  t.frames.empty() ? nullptr : t.frames.back().fn};
  for (std::uint64_t b = offset; b < offset + size; ++b) {
    if (l.check_init && access == Access::load && !s.written[b])
      throw KernelFault(fmt::format(
          "initcheck: read of uninitialized shared memory at offset {} {}: no thread of the "
          "block has written byte {} of the {} bytes read",
          offset, where(t, &in), b, size));
    if (access != Access::load) s.written[b] = 1;
    if (!l.check_race || access == Access::atomic) continue;
    if (access == Access::load) {
      if (!ordered(t, s.writer[b])) hazard(t, in, offset, "RAW", "reads", "wrote", s.writer[b]);
      // Keep up to two unordered readers from different threads, so a later write by one of
      // them still sees the other.
      if (s.reader[b].thread != t.linear) s.other_reader[b] = s.reader[b];
      s.reader[b] = me;
    } else {
      if (!ordered(t, s.writer[b])) hazard(t, in, offset, "WAW", "writes", "wrote", s.writer[b]);
      if (!ordered(t, s.reader[b])) hazard(t, in, offset, "WAR", "writes", "read", s.reader[b]);
      if (!ordered(t, s.other_reader[b]))
        hazard(t, in, offset, "WAR", "writes", "read", s.other_reader[b]);
      s.writer[b] = me;
      s.reader[b] = {};
      s.other_reader[b] = {};
    }
  }
}

}  // namespace kiln::cuda::vgpu
