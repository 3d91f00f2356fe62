// Choosing the FlashAttention kernels' tiles (see attention_tiling.h).
#include "jit/codegen/attention_tiling.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/error.h"

namespace kiln::jit::codegen::attention_tiles {

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

namespace {

// The largest streamed tile that fits beside `warps` warps' fixed tile: 64 rows for head dims up
// to 64 (32 above, 16 for dk/dv blocks, which hold two gradient accumulators), double-buffered
// where that keeps at least 32 rows. bn 0 when nothing fits.
Stream stream_for(Role role, int elem, int dk, int dv, int warps) {
  int widest = std::max(dk, dv);
  int bn_max = widest <= 64 ? 64 : role == Role::dkdv ? 16 : 32;
  for (int bn = bn_max; bn >= 16; bn /= 2)
    for (int stages : {2, 1}) {
      if (stages == 2 && bn < std::min(32, bn_max)) continue;
      Stream s{bn, stages};
      if (shared_bytes(role, elem, dk, dv, warps, s) <= kSharedLimit) return s;
    }
  return {};
}

}  // namespace

std::optional<Tiling> fitting_tiling(Kernel kind, int elem, int dk, int dv) {
  for (int warps : {4, 2, 1}) {
    Tiling t;
    t.warps = warps;
    if (kind == Kernel::forward) {
      t.first = stream_for(Role::forward, elem, dk, dv, warps);
      if (!t.first.bn) continue;
      t.shared = shared_bytes(Role::forward, elem, dk, dv, warps, t.first);
    } else {
      t.first = stream_for(Role::dq, elem, dk, dv, warps);
      t.second = stream_for(Role::dkdv, elem, dk, dv, warps);
      if (!t.first.bn || !t.second.bn) continue;
      t.shared = std::max(shared_bytes(Role::dq, elem, dk, dv, warps, t.first),
                          shared_bytes(Role::dkdv, elem, dk, dv, warps, t.second));
    }
    return t;
  }
  return std::nullopt;
}

Tiling tiling_for(Kernel kind, int elem, int dk, int dv) {
  auto t = fitting_tiling(kind, elem, dk, dv);
  KILN_CHECK(t, "attention: no tiling of {} KB of shared memory fits head dims {} and {}",
             kSharedLimit / 1024, dk, dv);
  return *t;
}

}  // namespace kiln::jit::codegen::attention_tiles
