// Shapes and strides, and the shape rules shared by every backend: broadcasting, reduction
// shapes, dim normalization. One implementation serves eager execution and tracing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

using Shape = std::vector<std::int64_t>;
using Strides = std::vector<std::int64_t>;

std::int64_t numel(const Shape& shape);
Strides contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3]"

// Maps a possibly negative `dim` into [0, rank); IndexError naming `op` otherwise.
std::int64_t normalize_dim(std::int64_t dim, std::int64_t rank, std::string_view op);
// Normalizes and sorts a dim list; an empty list means every dim. Rejects duplicates.
std::vector<std::int64_t> normalize_dims(const std::vector<std::int64_t>& dims, std::int64_t rank,
                                         std::string_view op);

// NumPy broadcasting; ShapeError naming `op` and both shapes when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);
// The sizes left after reducing `dims` (normalized) of `sizes`: dropped, or `one` with keepdim.
// Generic so that symbolic sizes (graph/sym_shapes.cpp) follow the same rule.
template <typename Size>
std::vector<Size> reduce_dims(const std::vector<Size>& sizes, const std::vector<std::int64_t>& dims,
                              bool keepdim, const Size& one) {
  std::vector<Size> out;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    bool reduced = false;
    for (auto d : dims) reduced = reduced || d == static_cast<std::int64_t>(i);
    if (!reduced)
      out.push_back(sizes[i]);
    else if (keepdim)
      out.push_back(one);
  }
  return out;
}
inline Shape reduced_shape(const Shape& shape, const std::vector<std::int64_t>& dims,
                           bool keepdim) {
  return reduce_dims<std::int64_t>(shape, dims, keepdim, 1);
}

// Strides that view a tensor of (shape, strides) as `new_shape` without copying, or an empty
// optional-like result (`ok == false`) when the memory layout does not allow it.
struct ViewStrides {
  bool ok = false;
  Strides strides;
};
ViewStrides view_strides(const Shape& shape, const Strides& strides, const Shape& new_shape);

// Row-major contiguity; the strides of size-1 dims do not matter.
bool is_contiguous(const Shape& shape, const Strides& strides);

// The memory layout classes that graphs record and guards check: row-major contiguous, a
// transposed matrix or batch of them (contiguous once the last two dims swap), or anything else.
enum class StrideClass : std::uint8_t { contiguous, transposed, general };
StrideClass stride_class(const Shape& shape, const Strides& strides);
std::string_view stride_class_name(StrideClass c);

// Resolves one -1 in a reshape target; ShapeError if numel differs.
Shape infer_reshape(const Shape& shape, Shape target, std::string_view op);

}  // namespace kiln
