// Classifying strides.
#include "graph/stride_class.h"

namespace kiln {

namespace {

// Row-major contiguity, ignoring the strides of size-1 dims (as Tensor::is_contiguous does).
bool contiguous(const Shape& shape, const Strides& strides) {
  std::int64_t expected = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

}  // namespace

StrideClass stride_class(const TensorImpl& impl) {
  if (contiguous(impl.shape, impl.strides)) return StrideClass::contiguous;
  const Shape& shape = impl.shape;
  if (shape.size() >= 2) {
    // Contiguous once the last two dims are swapped: a transposed matrix (or batch of them).
    Shape s = shape;
    Strides st = impl.strides;
    std::swap(s[s.size() - 1], s[s.size() - 2]);
    std::swap(st[st.size() - 1], st[st.size() - 2]);
    if (contiguous(s, st)) return StrideClass::transposed;
  }
  return StrideClass::general;
}

std::string_view stride_class_name(StrideClass c) {
  switch (c) {
    case StrideClass::contiguous:
      return "contiguous";
    case StrideClass::transposed:
      return "transposed";
    case StrideClass::general:
      return "general";
  }
  return "?";
}

}  // namespace kiln
