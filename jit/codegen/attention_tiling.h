// The FlashAttention kernels' tiles (jit/codegen/attention.h): how many warps a block takes and
// how many rows each streamed tile has, chosen per head dim and element size so that a block's
// static shared memory fits; what a launch uses and what attention_unsupported checks.
#pragma once

#include <cstdint>
#include <optional>

namespace kiln::jit::codegen::attention_tiles {

// The two launches: the forward, and the backward (whose blocks are of two kinds: dq over
// query tiles, dk/dv over key tiles).
enum class Kernel { forward, backward };
enum class Role { forward, dq, dkdv };

// The static shared memory one block may use without opting in (the kernels use no dynamic).
inline constexpr std::int64_t kSharedLimit = 48 * 1024;

// Tile shapes: warps (16 rows of a block's fixed tile each), and per kind of block the rows of
// the streamed tile and whether it is double-buffered.
struct Stream {
  int bn = 0, stages = 0;
};
struct Tiling {
  int warps = 0;
  Stream first, second;  // forward: first only; backward: dq blocks, dk/dv blocks
  std::int64_t shared = 0;
};

// A head dim rounded up to the tensor-core k-step (16): the kernels zero-pad the rest.
int padded(int head);
// The shared memory one block of `role` takes with these tiles.
std::int64_t shared_bytes(Role role, int elem, int dk, int dv, int warps, const Stream& s);
// The largest tiles that fit (most warps first), or nullopt when none does.
std::optional<Tiling> fitting_tiling(Kernel kind, int elem, int dk, int dv);
// The same, a kiln::Error naming the head dims when none fits.
Tiling tiling_for(Kernel kind, int elem, int dk, int dv);

}  // namespace kiln::jit::codegen::attention_tiles
