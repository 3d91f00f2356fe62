// How a launch of a pointwise kernel walks its domain, decided on the host per call: dims that
// every tensor steps through contiguously merged into one, the domain cut into pieces that
// 32-bit indices reach (one piece unless a tensor is huge), and whether each piece takes the
// vector path (every tensor aligned for it) and for how many elements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kiln::jit::codegen {

// The largest element count and offset a kernel's unsigned 32-bit index arithmetic handles.
// Kept below 2^31 so that `i + gridDim.x * blockDim.x` never wraps either.
inline constexpr std::int64_t kIndexLimit = (std::int64_t{1} << 31) - 1;

// A domain and, per tensor read, its strides in elements (0 where it broadcasts). Outermost dim
// first; every vector has the kernel's rank.
struct IterSpace {
  std::vector<std::int64_t> sizes;
  std::vector<std::vector<std::int64_t>> strides;  // [read][dim]

  std::int64_t numel() const;
};

// `space` with size-1 dims dropped and each pair of neighbours merged where every read steps
// from one into the other contiguously (stride[d] == stride[d + 1] * size[d + 1]; the outputs,
// contiguous over the domain, always do): a contiguous tensor of any shape becomes one dim, a
// bias broadcast over rows two. The rank is kept, with leading dims of size 1.
IterSpace merge_dims(const IterSpace& space);

// A part of the domain that one launch covers with 32-bit indices.
struct IterPiece {
  IterSpace space;
  std::vector<std::int64_t> read_offsets;  // elements added to each read's pointer
  std::int64_t first = 0;                  // its first element's linear index (the outputs')
};

// Whether 32-bit indices reach every element and every read's every offset in `space`.
bool fits_index(const IterSpace& space, std::int64_t limit = kIndexLimit);
// `space` cut along its outer dims into pieces that fit: `space` itself when it fits already;
// else, below the outermost dim whose inner dims fit, runs of that dim as long as fit. Each
// piece is a contiguous range of linear indices, so outputs are written at `first` onward.
std::vector<IterPiece> split_for_index(const IterSpace& space, std::int64_t limit = kIndexLimit);

// A tensor as a launch touches it: where its first element is, its element size, and (reads)
// whether the kernel reads it as constant along a vector (one element per vector).
struct TensorAccess {
  std::uintptr_t address = 0;
  std::size_t itemsize = 0;
  bool splat = false;
};

// How many groups of `width` elements of a (merged) piece the vector path takes. Some when
// vectors never straddle a row (one dim left, or an inner size `width` divides) and every
// tensor is as the kernel reads it: a splat read constant along the inner dim (stride 0), any
// other contiguous along it, aligned to its vector access, with outer strides `width` divides.
// Otherwise none: the scalar loop runs every element. With one dim left, the last
// numel % width elements are the scalar loop's.
std::int64_t plan_vectors(const IterSpace& piece, int width, std::span<const TensorAccess> reads,
                          std::span<const TensorAccess> writes);

// Whether a launch's vector path advances offsets instead of computing them per vector, with its
// grid. It does where the grid's step in elements (blocks * block * width) is a multiple of the
// elements inside the piece's outermost dim of size > 1 (always with one dim left; for a bias
// broadcast over rows, where the step is a multiple of the row): then from one vector of a thread
// to its next every read's offset moves by a constant, its `delta`, below 2^32. `blocks` is
// the grid for the vectors at several per thread; it may be rounded up to a multiple that makes
// the step fit, up to twice `blocks` and within `max_blocks`. Off where `vectors` is 0.
struct AdvancePlan {
  bool on = false;
  unsigned blocks = 0;
  std::vector<std::int64_t> delta;  // per read, in elements
};
AdvancePlan plan_advance(const IterSpace& piece, std::int64_t vectors, int width, unsigned block,
                         unsigned blocks, unsigned max_blocks);

}  // namespace kiln::jit::codegen
