// Choosing a pointwise kernel's launches per call (see pointwise_schedule.h).
#include "jit/codegen/pointwise_schedule.h"

#include <fmt/format.h>

#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/pointwise.h"

namespace kiln::jit::codegen {
namespace {

// The vector path and advancing offsets of one piece, and its grid.
void plan_piece(const PointwiseKernel& kernel, PointwiseLaunch& l, const ScheduleLimits& limits,
                std::vector<std::string>* why) {
  const int width = kernel.vector_width;
  l.vectors = limits.pointwise_vectors ? plan_vectors(l.piece.space, width, l.reads, l.writes) : 0;
  std::int64_t threads = (l.vectors + kernel.vectors_per_thread - 1) / kernel.vectors_per_thread;
  if (limits.pointwise_advance)
    l.advance = plan_advance(l.piece.space, l.vectors, width, kPointwiseBlock,
                             grid_stride_blocks(threads, kPointwiseBlock),
                             grid_stride_blocks(kIndexLimit, kPointwiseBlock));
  // A read the kernel loads once per thread must not move.
  for (std::size_t k = 0; k < l.reads.size() && l.advance.on; ++k)
    if (kernel.stationary[k] && l.advance.delta[k] != 0) l.advance = AdvancePlan{};
  const auto n = static_cast<std::uint32_t>(l.piece.space.numel());
  const auto vector_count = static_cast<std::uint32_t>(l.vectors);
  l.blocks = l.advance.on
                 ? l.advance.blocks
                 : grid_stride_blocks(vector_count > 0 ? vector_count : n, kPointwiseBlock);
  if (!why) return;
  why->push_back(l.vectors == 0 ? fmt::format("{} elements one at a time: {}", n,
                                              limits.pointwise_vectors
                                                  ? "a tensor is not aligned or contiguous for "
                                                    "vectors of " +
                                                        std::to_string(width)
                                                  : "the limits allow no vectors")
                                : fmt::format("{} vectors of {}, offsets {}", l.vectors, width,
                                              l.advance.on ? "advancing by a constant per grid step"
                                                           : "computed per vector"));
}

}  // namespace

std::string PointwiseSchedule::str() const {
  std::string s = fmt::format("{} launch{}", launches.size(), launches.size() == 1 ? "" : "es");
  for (const auto& l : launches)
    s += fmt::format("; {} elements, {} vectors{}, {} blocks of {}", l.piece.space.numel(),
                     l.vectors, l.advance.on ? " (advancing)" : "", l.blocks, kPointwiseBlock);
  return s;
}

PointwiseSchedule schedule_pointwise(const PointwiseKernel& kernel, const IterSpace& space,
                                     std::span<const TensorAccess> reads,
                                     std::span<const TensorAccess> writes,
                                     const ScheduleLimits& limits, std::vector<std::string>* why) {
  PointwiseSchedule s;
  std::vector<IterPiece> pieces = split_for_index(merge_dims(space), limits.pointwise_index_limit);
  if (why && pieces.size() > 1)
    why->push_back(
        fmt::format("{} launches: 32-bit indices do not reach every element", pieces.size()));
  for (IterPiece& piece : pieces) {
    PointwiseLaunch& l = s.launches.emplace_back();
    l.reads.assign(reads.begin(), reads.end());
    l.writes.assign(writes.begin(), writes.end());
    for (std::size_t k = 0; k < reads.size(); ++k)
      l.reads[k].address += piece.read_offsets[k] * reads[k].itemsize;
    for (auto& w : l.writes) w.address += piece.first * w.itemsize;
    l.piece = std::move(piece);
    plan_piece(kernel, l, limits, why);
  }
  return s;
}

}  // namespace kiln::jit::codegen
