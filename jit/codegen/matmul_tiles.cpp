// The generated GEMM's tile table and the per-architecture choice (see matmul_tiles.h).
#include "jit/codegen/matmul_tiles.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "runtime/error.h"

namespace kiln::jit::codegen {
namespace {

struct WarpGrid {
  int warps_m, warps_n, mi, nj;
  int min_stages;
};
// Smallest first (matmul_tiles.h); a 64 x 64 warp tile keeps 128 f32 accumulators per thread.
constexpr std::array<WarpGrid, kMatmulShapeCount> kShapes{{
    {2, 2, 2, 4, 2},  // 64 x 64, 128 threads
    {2, 2, 4, 8, 3},  // 128 x 128, 128 threads
    {2, 4, 4, 8, 3},  // 128 x 256, 256 threads
}};

}  // namespace

MatmulTile matmul_tile_shape(int index, int stages) {
  KILN_CHECK(index >= 0 && index < kMatmulShapeCount, "matmul tile shape {} of {}", index,
             kMatmulShapeCount);
  const WarpGrid& s = kShapes[static_cast<std::size_t>(index)];
  return MatmulTile{s.warps_m, s.warps_n, s.mi, s.nj, stages};
}

int matmul_tile_slot(const MatmulTile& tile) {
  if (tile.stages < kMatmulMinStages || tile.stages > kMatmulMaxStages) return -1;
  for (int i = 0; i < kMatmulShapeCount; ++i) {
    if (matmul_tile_shape(i, tile.stages) == tile)
      return i * (kMatmulMaxStages - kMatmulMinStages + 1) + tile.stages - kMatmulMinStages;
  }
  return -1;
}

std::size_t matmul_stage_bytes(const MatmulTile& tile, const MatmulStaging& st) {
  // templates/matmul_mma.cu.mustache's LDA / LDB: k-rows padded by 16 bytes, m/n-rows by 8
  // elements.
  std::size_t pad_k = st.elem_bytes == 2 ? 8 : 4, k = kMatmulTileK;
  std::size_t bm = static_cast<std::size_t>(tile.bm()), bn = static_cast<std::size_t>(tile.bn());
  std::size_t a = st.a_k_contiguous ? bm * (k + pad_k) : k * (bm + 8);
  std::size_t b = st.b_k_contiguous ? bn * (k + pad_k) : k * (bn + 8);
  return (a + b) * static_cast<std::size_t>(st.elem_bytes);
}

std::size_t matmul_shared_bytes(const MatmulTile& tile, const MatmulStaging& st) {
  return matmul_stage_bytes(tile, st) * static_cast<std::size_t>(tile.stages);
}

MatmulDevice MatmulDevice::of(const cuda::DeviceProperties& props) {
  return MatmulDevice{props.compute_major, props.compute_minor, props.sm_count,
                      props.shared_mem_per_block_optin};
}

MatmulTile choose_matmul_tile(long long m, long long n, long long batches,
                              const MatmulStaging& staging, const MatmulDevice& device) {
  // An SM has the opt-in maximum + 1 KiB, and each resident block reserves 1 KiB of it (CUDA
  // Programming Guide, shared memory of compute capability 8.x / 9.0): two blocks' worth.
  constexpr std::size_t kReserved = 1024;
  const std::size_t budget = (device.shared_optin + kReserved) / 2 - kReserved;
  auto staged = [&](int index) {
    MatmulTile t = matmul_tile_shape(index, kMatmulMinStages);
    std::size_t per_stage = matmul_stage_bytes(t, staging);
    t.stages = static_cast<int>(std::min<std::size_t>(kMatmulMaxStages, budget / per_stage));
    return t;
  };
  auto blocks = [&](const MatmulTile& t) {
    return ((m + t.bm() - 1) / t.bm()) * ((n + t.bn() - 1) / t.bn()) * std::max(1ll, batches);
  };
  for (int i = kMatmulShapeCount - 1; i > 0; --i) {
    MatmulTile t = staged(i);
    if (t.stages >= kShapes[static_cast<std::size_t>(i)].min_stages &&
        blocks(t) >= std::max(1, device.sm_count))
      return t;
  }
  MatmulTile small = staged(0);
  // Even a device with no more than 48 KiB per block fits two stages of the smallest tile.
  small.stages = std::max(small.stages, kMatmulMinStages);
  return small;
}

std::string tile_text(const MatmulTile& t) {
  return fmt::format("{}x{}x{} s{}", t.bm(), t.bn(), kMatmulTileK, t.stages);
}

}  // namespace kiln::jit::codegen
