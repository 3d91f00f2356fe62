// Shape rules shared by every backend.
#include "runtime/shape.h"

#include <algorithm>

#include "runtime/error.h"

namespace kiln {

std::int64_t numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  std::int64_t s = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<std::int64_t>(shape[i], 1);
  }
  return strides;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::int64_t normalize_dim(std::int64_t dim, std::int64_t rank, std::string_view op) {
  // A 0-d tensor accepts dim 0 and -1, as in PyTorch.
  std::int64_t r = std::max<std::int64_t>(rank, 1);
  KILN_CHECK_AS(IndexError, dim >= -r && dim < r,
                "{}: dim {} is out of range for a tensor of rank {} (expected [{}, {}])", op, dim,
                rank, -r, r - 1);
  return dim < 0 ? dim + r : dim;
}

std::vector<std::int64_t> normalize_dims(const std::vector<std::int64_t>& dims, std::int64_t rank,
                                         std::string_view op) {
  std::vector<std::int64_t> out;
  if (dims.empty()) {
    for (std::int64_t i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (auto d : dims) out.push_back(normalize_dim(d, rank, op));
  std::sort(out.begin(), out.end());
  KILN_CHECK_AS(IndexError, std::adjacent_find(out.begin(), out.end()) == out.end(),
                "{}: dim list [{}] names a dim twice", op, fmt::join(dims, ", "));
  if (rank == 0) out.clear();  // reducing a 0-d tensor over dim 0 is the identity
  return out;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  std::size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    std::int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    std::int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    KILN_CHECK_AS(ShapeError, da == db || da == 1 || db == 1,
                  "{}: shapes {} and {} are not broadcastable (dim {}: {} vs {})", op,
                  shape_str(a), shape_str(b), i, da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// PyTorch's computeStride: groups of old dims that are contiguous among themselves can be
// re-split arbitrarily; a new dim may not straddle a stride discontinuity.
ViewStrides view_strides(const Shape& shape, const Strides& strides, const Shape& new_shape) {
  ViewStrides result;
  if (shape.empty() || numel(shape) == 0) {
    result.ok = true;
    result.strides = contiguous_strides(new_shape);
    return result;
  }
  Strides out(new_shape.size());
  std::int64_t view_d = static_cast<std::int64_t>(new_shape.size()) - 1;
  std::int64_t chunk_base_stride = strides.back();
  std::int64_t tensor_numel = 1, view_numel = 1;
  for (std::int64_t d = static_cast<std::int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return result;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return result;
  result.ok = true;
  result.strides = std::move(out);
  return result;
}

bool is_contiguous(const Shape& shape, const Strides& strides) {
  std::int64_t expected = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

StrideClass stride_class(const Shape& shape, const Strides& strides) {
  if (is_contiguous(shape, strides)) return StrideClass::contiguous;
  if (shape.size() >= 2) {
    Shape s = shape;
    Strides st = strides;
    std::swap(s[s.size() - 1], s[s.size() - 2]);
    std::swap(st[st.size() - 1], st[st.size() - 2]);
    if (is_contiguous(s, st)) return StrideClass::transposed;
  }
  return StrideClass::general;
}

std::string_view stride_class_name(StrideClass c) {
  switch (c) {
    case StrideClass::contiguous: return "contiguous";
    case StrideClass::transposed: return "transposed";
    case StrideClass::general: return "general";
  }
  return "?";
}

Shape infer_reshape(const Shape& shape, Shape target, std::string_view op) {
  std::int64_t known = 1;
  int infer_at = -1;
  for (std::size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      KILN_CHECK_AS(ShapeError, infer_at < 0, "{}: only one dim may be -1 in {}", op,
                    shape_str(target));
      infer_at = static_cast<int>(i);
    } else {
      KILN_CHECK_AS(ShapeError, target[i] >= 0, "{}: invalid size {} in {}", op, target[i],
                    shape_str(target));
      known *= target[i];
    }
  }
  std::int64_t n = numel(shape);
  if (infer_at >= 0) {
    KILN_CHECK_AS(ShapeError, known != 0 && n % known == 0,
                  "{}: shape {} is invalid for input of shape {} ({} elements)", op,
                  shape_str(target), shape_str(shape), n);
    target[infer_at] = n / known;
  }
  KILN_CHECK_AS(ShapeError, numel(target) == n,
                "{}: shape {} is invalid for input of shape {} ({} elements)", op,
                shape_str(target), shape_str(shape), n);
  return target;
}

}  // namespace kiln
