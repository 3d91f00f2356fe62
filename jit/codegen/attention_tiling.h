// The FlashAttention kernels' tiles (jit/codegen/attention.h): how many warps a block takes and
// how many rows each streamed tile has, chosen per head dim, element size and the device's
// shared-memory budget (the most one block may have once its function opts in: 48 KB without,
// 99 KB on sm_86/89, 163 KB on sm_80, 227 KB on sm_90); what a launch uses and what
// attention_unsupported checks. A Tiling is a value: the schedule apart from rendering.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace kiln::jit::codegen::attention_tiles {

// The two launches: the forward, and the backward (whose blocks are of two kinds: dq over
// query tiles, dk/dv over key tiles).
enum class Kernel { forward, backward };
enum class Role { forward, dq, dkdv };

// The shared memory one block may use without opting in: the budget of a device that allows no
// more, and the tiles every device had before the kernels took dynamic shared memory.
inline constexpr std::int64_t kDefaultShared = 48 * 1024;

// Tile shapes: warps (16 rows of a block's fixed tile each), and per kind of block the rows of
// the streamed tile and whether it is double-buffered.
struct Stream {
  int bn = 0, stages = 0;
};
struct Tiling {
  int warps = 0;
  Stream first, second;     // forward: first only; backward: dq blocks, dk/dv blocks
  std::int64_t shared = 0;  // dynamic shared memory a block takes (the larger kind's)
  std::int64_t budget = 0;  // what it was chosen within
  // "w4 n32s2" (forward) or "w4 n32s1 n16s2" (backward): what the kernel's name carries.
  std::string tag() const;
  // The same in words, with the bytes and the budget: what explain() and KILN_LOG print.
  std::string str() const;
};

// A head dim rounded up to the tensor-core k-step (16): the kernels zero-pad the rest.
int padded(int head);
// The shared memory one block of `role` takes with these tiles.
std::int64_t shared_bytes(Role role, int elem, int dk, int dv, int warps, const Stream& s);
// The shared memory the smallest tiles (one warp, 16-row single-buffered streams) need: below
// this budget no tiling fits.
std::int64_t smallest_shared(Kernel kind, int elem, int dk, int dv);

// The tiles within `budget` bytes, or nullopt when none fits. The rule, in order of preference:
//  1. the most warps, up to 4 (one block of 4 warps per SM at least: the 16-row warp tiles of
//     a 64-row block share each streamed K/V tile, so more warps means fewer passes over K and
//     V per head and fewer blocks per head);
//  2. the longest streamed tile up to its register cap (64 rows for head dims up to 64, else 32,
//     and 16 for dk/dv blocks, which hold two gradient accumulators): fewer tile iterations;
//  3. double-buffered (cp.async loads the next tile while this one computes) where the stream
//     keeps at least 32 rows (or its cap).
// The caps are registers, which every architecture has alike; only the budget differs, so a
// 48 KB budget gives exactly the tiles of the static-shared-memory kernels, and a larger one
// more warps, longer or double-buffered streams where 48 KB forced fewer (f32 and head dims
// past 64), and tiles at all for f32 head dims up to 256.
std::optional<Tiling> fitting_tiling(Kernel kind, int elem, int dk, int dv, std::int64_t budget);
// The same, a kiln::Error naming the head dims and the bytes needed when none fits.
Tiling tiling_for(Kernel kind, int elem, int dk, int dv, std::int64_t budget);

}  // namespace kiln::jit::codegen::attention_tiles
