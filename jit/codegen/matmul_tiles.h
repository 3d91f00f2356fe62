// The generated tensor-core GEMM's block tiles: the shapes its template takes, the dynamic shared
// memory each needs, and the rule that picks one per GPU architecture and problem shape.
#pragma once

#include <cstddef>
#include <string>

#include "runtime/cuda/backend.h"

namespace kiln::jit::codegen {

// A block of warps_m x warps_n warps, each computing mi m16 x nj n8 mma tiles, over K-steps of
// 32 staged through a ring of `stages` shared tiles (templates/matmul_mma.cu.mustache).
struct MatmulTile {
  int warps_m = 2, warps_n = 2;
  int mi = 2, nj = 4;
  int stages = 2;

  int bm() const { return warps_m * 16 * mi; }
  int bn() const { return warps_n * 8 * nj; }
  unsigned threads() const { return static_cast<unsigned>(32 * warps_m * warps_n); }
  bool operator==(const MatmulTile&) const = default;
};

inline constexpr int kMatmulTileK = 32;
inline constexpr int kMatmulMinStages = 2, kMatmulMaxStages = 4;
// The block shapes, smallest first: 64 x 64 (4 warps of 32 x 32), 128 x 128 (4 warps of
// 64 x 64), 128 x 256 (8 warps of 64 x 64); each with 2 to 4 stages.
inline constexpr int kMatmulShapeCount = 3;
MatmulTile matmul_tile_shape(int index, int stages);
// Index of `tile` among the shape x stage combinations, or -1 when it is none of them.
int matmul_tile_slot(const MatmulTile& tile);
inline constexpr int kMatmulTileSlots =
    kMatmulShapeCount * (kMatmulMaxStages - kMatmulMinStages + 1);

// How the tensor-core kernel stages its operands: element size (2 for f16/bf16, 4 for TF32) and
// which dim of each shared tile is contiguous (MatmulVariant's layout).
struct MatmulStaging {
  int elem_bytes = 2;
  bool a_k_contiguous = true, b_k_contiguous = false;
};

// Dynamic shared memory of one K-step's tiles of a and b (padded rows), and of the whole ring.
std::size_t matmul_stage_bytes(const MatmulTile& tile, const MatmulStaging& staging);
std::size_t matmul_shared_bytes(const MatmulTile& tile, const MatmulStaging& staging);

// What the choice reads of the device: SMs and the per-block shared memory opt-in maximum.
struct MatmulDevice {
  int compute_major = 9, compute_minor = 0;
  int sm_count = 132;
  std::size_t shared_optin = 227 * 1024;
  static MatmulDevice of(const cuda::DeviceProperties& props);
};

// The tile for an m x n output (times `batches`) on `device`:
//  - shared memory: a block takes at most what lets two blocks' tiles fit on an SM (one's
//    prologue and epilogue overlap the other's main loop): half of the SM's opt-in maximum + 1 KiB,
//    less the 1 KiB each block reserves: sm_90 113 KiB, sm_80 81 KiB, sm_86/89 49 KiB, a 48 KiB
//    device 23.5 KiB; stages = what fits, up to 4;
//  - a 128-wide tile needs 3 stages at least (a K-step of it loads too long for double
//    buffering to hide), a 64 x 64 tile 2;
//  - waves: the largest shape whose grid still has a block for every SM (>= 1 wave);
//    below that the 64 x 64 tile, the most blocks.
// So on sm_90 a large problem takes 128 x 256 with 4 stages, on sm_80 128 x 256 with 3, on a
// 48 KiB device 64 x 64 with 2 (static-limit sized, no opt-in); a small problem 64 x 64.
MatmulTile choose_matmul_tile(long long m, long long n, long long batches,
                              const MatmulStaging& staging, const MatmulDevice& device);

// "128x256x32 s4" as KILN_LOG=kernels and kernel names show it.
std::string tile_text(const MatmulTile& tile);

}  // namespace kiln::jit::codegen
