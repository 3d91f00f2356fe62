// A pointwise launch's walk over its domain (see pointwise_layout.h).
#include "jit/codegen/pointwise_layout.h"

#include <algorithm>
#include <numeric>

namespace kiln::jit::codegen {
namespace {

// The largest offset a read reaches over `sizes` (dims from `from` on).
std::int64_t max_offset(const IterSpace& s, std::size_t read, std::size_t from = 0) {
  std::int64_t m = 0;
  for (std::size_t d = from; d < s.sizes.size(); ++d) m += (s.sizes[d] - 1) * s.strides[read][d];
  return m;
}

std::int64_t numel_from(const IterSpace& s, std::size_t from) {
  std::int64_t n = 1;
  for (std::size_t d = from; d < s.sizes.size(); ++d) n *= s.sizes[d];
  return n;
}

// Whether the dims from `from` on fit 32-bit indices.
bool fits_from(const IterSpace& s, std::size_t from, std::int64_t limit) {
  if (numel_from(s, from) > limit) return false;
  for (std::size_t k = 0; k < s.strides.size(); ++k)
    if (max_offset(s, k, from) > limit) return false;
  return true;
}

}  // namespace

std::int64_t IterSpace::numel() const {
  return numel_from(*this, 0);
}

IterSpace merge_dims(const IterSpace& space) {
  std::size_t rank = space.sizes.size(), reads = space.strides.size();
  IterSpace m;  // innermost first while building
  m.strides.resize(reads);
  for (std::size_t d = rank; d-- > 0;) {
    std::int64_t size = space.sizes[d];
    if (size == 1) continue;
    bool contiguous = !m.sizes.empty();
    for (std::size_t k = 0; k < reads && contiguous; ++k)
      contiguous = space.strides[k][d] == m.strides[k].back() * m.sizes.back();
    if (contiguous) {
      m.sizes.back() *= size;
      continue;
    }
    m.sizes.push_back(size);
    for (std::size_t k = 0; k < reads; ++k) m.strides[k].push_back(space.strides[k][d]);
  }
  // Back to outermost first, padded to the rank with leading size-1 dims.
  m.sizes.resize(rank, 1);
  std::reverse(m.sizes.begin(), m.sizes.end());
  for (auto& s : m.strides) {
    s.resize(rank, 0);
    std::reverse(s.begin(), s.end());
  }
  return m;
}

bool fits_index(const IterSpace& space, std::int64_t limit) {
  return fits_from(space, 0, limit);
}

std::vector<IterPiece> split_for_index(const IterSpace& space, std::int64_t limit) {
  std::size_t reads = space.strides.size();
  if (fits_index(space, limit)) return {IterPiece{space, std::vector<std::int64_t>(reads, 0), 0}};
  // The outermost dim whose inner dims fit (the innermost always does: nothing is inside it),
  // cut into runs of `rows` that fit with them.
  std::size_t cut = 0;
  while (!fits_from(space, cut + 1, limit)) ++cut;
  std::int64_t inner = numel_from(space, cut + 1), rows = limit / inner;
  for (std::size_t k = 0; k < reads; ++k)
    if (space.strides[k][cut] > 0)
      rows = std::min(rows, (limit - max_offset(space, k, cut + 1)) / space.strides[k][cut] + 1);
  rows = std::max<std::int64_t>(1, rows);

  std::vector<IterPiece> pieces;
  std::vector<std::int64_t> at(cut, 0);  // the coordinates of the dims outside the cut
  for (;;) {
    for (std::int64_t r = 0; r < space.sizes[cut]; r += rows) {
      IterPiece p{space, std::vector<std::int64_t>(reads, 0), 0};
      for (std::size_t d = 0; d < cut; ++d) p.space.sizes[d] = 1;
      p.space.sizes[cut] = std::min(rows, space.sizes[cut] - r);
      for (std::size_t d = 0; d <= cut; ++d) {
        std::int64_t coordinate = d < cut ? at[d] : r;
        p.first += coordinate * numel_from(space, d + 1);
        for (std::size_t k = 0; k < reads; ++k)
          p.read_offsets[k] += coordinate * space.strides[k][d];
      }
      pieces.push_back(std::move(p));
    }
    // The next coordinates outside the cut, the last one fastest.
    std::size_t d = cut;
    while (d > 0 && ++at[d - 1] == space.sizes[d - 1]) at[--d] = 0;
    if (d == 0) break;
  }
  return pieces;
}

std::int64_t plan_vectors(const IterSpace& piece, int width, std::span<const TensorAccess> reads,
                          std::span<const TensorAccess> writes) {
  std::size_t inner = piece.sizes.size() - 1;
  auto w = static_cast<std::int64_t>(width);
  bool rows = piece.numel() != piece.sizes[inner];
  if (w < 2 || (rows && piece.sizes[inner] % w != 0)) return 0;
  auto aligned = [&](const TensorAccess& t) {
    return t.address % (static_cast<std::uintptr_t>(w) * t.itemsize) == 0;
  };
  for (std::size_t k = 0; k < reads.size(); ++k) {
    const auto& stride = piece.strides[k];
    if (reads[k].splat) {
      if (stride[inner] != 0) return 0;
      continue;
    }
    if (stride[inner] != 1 || !aligned(reads[k])) return 0;
    for (std::size_t d = 0; d < inner; ++d)
      if (piece.sizes[d] > 1 && stride[d] % w != 0) return 0;
  }
  for (const auto& t : writes)
    if (!aligned(t)) return 0;
  return piece.numel() / w;
}

AdvancePlan plan_advance(const IterSpace& piece, std::int64_t vectors, int width, unsigned block,
                         unsigned blocks, unsigned max_blocks) {
  AdvancePlan plan;
  if (vectors <= 0 || width < 1 || block == 0 || blocks == 0) return plan;
  std::size_t outer = 0, rank = piece.sizes.size();
  while (outer + 1 < rank && piece.sizes[outer] == 1) ++outer;
  std::int64_t inner = numel_from(piece, outer + 1);
  std::int64_t per_block = std::int64_t{block} * width;
  // The fewest blocks whose step is a multiple of `inner`, and the grid rounded up to them: at
  // most twice the blocks, past which threads would have too few vectors to repay their setup.
  std::int64_t multiple = inner / std::gcd(inner, per_block);
  std::int64_t grid = (std::int64_t{blocks} + multiple - 1) / multiple * multiple;
  if (grid > std::min<std::int64_t>(2 * std::int64_t{blocks}, std::max(blocks, max_blocks)))
    return plan;
  std::int64_t rows_per_step = grid * per_block / inner;
  for (const auto& stride : piece.strides) {
    std::int64_t delta = rows_per_step * stride[outer];
    if (delta > std::int64_t{0xffffffff}) return plan;
    plan.delta.push_back(delta);
  }
  plan.on = true;
  plan.blocks = static_cast<unsigned>(grid);
  return plan;
}

}  // namespace kiln::jit::codegen
