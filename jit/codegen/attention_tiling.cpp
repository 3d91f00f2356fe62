// Choosing the FlashAttention kernels' tiles (see attention_tiling.h).
#include "jit/codegen/attention_tiling.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/error.h"

namespace kiln::jit::codegen::attention_tiles {

std::string Tiling::tag() const {
  std::string s = fmt::format("w{}n{}s{}", warps, first.bn, first.stages);
  if (second.bn) s += fmt::format("n{}s{}", second.bn, second.stages);
  return s;
}

std::string Tiling::str() const {
  auto stream = [](const Stream& s) {
    return fmt::format("{}-row tiles, {} stage{}", s.bn, s.stages,
                       s.stages == 1 ? "" : "s (cp.async double-buffered)");
  };
  std::string streams = stream(first);
  if (second.bn) streams = fmt::format("dq blocks {}, dk/dv blocks {}", streams, stream(second));
  return fmt::format(
      "{} warps (16 rows each), streamed {}; {} bytes of shared memory of the {} "
      "a block may have",
      warps, streams, shared, budget);
}

int padded(int head) {
  return (head + 15) / 16 * 16;
}

std::int64_t shared_bytes(Role role, int elem, int dk, int dv, int warps, const Stream& s) {
  std::int64_t ldk = dk + 8, ldv = dv + 8, bm = 16 * warps;
  std::int64_t fixed = role == Role::forward ? bm * ldk : bm * (ldk + ldv);
  std::int64_t bytes = elem * (fixed + s.stages * s.bn * (ldk + ldv));
  if (role == Role::dkdv) bytes += 8 * s.stages * s.bn;  // lse and D of the query tile
  return bytes;
}

std::int64_t smallest_shared(Kernel kind, int elem, int dk, int dv) {
  Stream s{16, 1};
  if (kind == Kernel::forward) return shared_bytes(Role::forward, elem, dk, dv, 1, s);
  return std::max(shared_bytes(Role::dq, elem, dk, dv, 1, s),
                  shared_bytes(Role::dkdv, elem, dk, dv, 1, s));
}

namespace {

// The longest streamed tile within `budget` beside `warps` warps' fixed tile, double-buffered
// where that keeps at least 32 rows (rules 2 and 3 of fitting_tiling). bn 0 when nothing fits.
Stream stream_for(Role role, int elem, int dk, int dv, int warps, std::int64_t budget) {
  int widest = std::max(dk, dv);
  int bn_max = widest <= 64 ? 64 : role == Role::dkdv ? 16 : 32;
  for (int bn = bn_max; bn >= 16; bn /= 2)
    for (int stages : {2, 1}) {
      if (stages == 2 && bn < std::min(32, bn_max)) continue;
      Stream s{bn, stages};
      if (shared_bytes(role, elem, dk, dv, warps, s) <= budget) return s;
    }
  return {};
}

}  // namespace

std::optional<Tiling> fitting_tiling(Kernel kind, int elem, int dk, int dv, std::int64_t budget) {
  for (int warps : {4, 2, 1}) {
    Tiling t;
    t.warps = warps;
    t.budget = budget;
    if (kind == Kernel::forward) {
      t.first = stream_for(Role::forward, elem, dk, dv, warps, budget);
      if (!t.first.bn) continue;
      t.shared = shared_bytes(Role::forward, elem, dk, dv, warps, t.first);
    } else {
      t.first = stream_for(Role::dq, elem, dk, dv, warps, budget);
      t.second = stream_for(Role::dkdv, elem, dk, dv, warps, budget);
      if (!t.first.bn || !t.second.bn) continue;
      t.shared = std::max(shared_bytes(Role::dq, elem, dk, dv, warps, t.first),
                          shared_bytes(Role::dkdv, elem, dk, dv, warps, t.second));
    }
    return t;
  }
  return std::nullopt;
}

Tiling tiling_for(Kernel kind, int elem, int dk, int dv, std::int64_t budget) {
  auto t = fitting_tiling(kind, elem, dk, dv, budget);
  KILN_CHECK(t,
             "attention: no {} tiling fits head dims {} and {} ({}-byte elements): the smallest "
             "needs {} bytes of shared memory per block, the device allows {}",
             kind == Kernel::forward ? "forward" : "backward", dk, dv, elem,
             smallest_shared(kind, elem, dk, dv), budget);
  return *t;
}

}  // namespace kiln::jit::codegen::attention_tiles
