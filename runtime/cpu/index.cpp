// Indexing kernels (gather, index_select, scatter_add, index_add) and the copying ops cat and
// pad. Index values are checked here, where the data is: IndexError names the bad value.
#include <algorithm>
#include <cstring>

#include "runtime/cpu/kernels.h"

namespace kiln::cpu {

namespace {

std::int64_t checked_index(std::int64_t v, std::int64_t size, std::string_view op,
                           std::int64_t dim) {
  KILN_CHECK_AS(IndexError, v >= 0 && v < size,
                "{}: index {} is out of range for dim {} of size {}", op, v, dim, size);
  return v;
}

template <typename Fn>
void for_each_position(const Shape& shape, Fn&& fn) {
  std::int64_t n = numel(shape);
  std::vector<std::int64_t> idx(shape.size(), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    fn(i, idx);
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

std::int64_t dot(const std::vector<std::int64_t>& idx, const Strides& strides, std::int64_t dim,
                 std::int64_t at_dim) {
  std::int64_t off = 0;
  for (std::size_t d = 0; d < idx.size(); ++d)
    off += (static_cast<std::int64_t>(d) == dim ? at_dim : idx[d]) * strides[d];
  return off;
}

}  // namespace

Tensor gather(const Tensor& x, const Tensor& index, std::int64_t dim, const TensorMeta& out) {
  dim = normalize_dim(dim, x.dim(), "gather");
  Tensor xc = materialize(x, x.shape(), x.dtype());
  Tensor ic = materialize(index, index.shape(), DType::i64);
  Tensor y = empty(out.shape, out.dtype);
  const auto* ip = static_cast<const std::int64_t*>(ic.raw_data());
  Strides xs = xc.strides();
  std::size_t bytes = itemsize(x.dtype());
  const char* src = static_cast<const char*>(xc.raw_data());
  char* dst = static_cast<char*>(y.raw_data());
  for_each_position(index.shape(), [&](std::int64_t i, const std::vector<std::int64_t>& idx) {
    std::int64_t j = checked_index(ip[i], x.shape()[dim], "gather", dim);
    std::memcpy(dst + i * bytes, src + dot(idx, xs, dim, j) * bytes, bytes);
  });
  return y;
}

Tensor index_select(const Tensor& x, const Tensor& index, std::int64_t dim,
                    const TensorMeta& out) {
  if (x.dim() == 0) return materialize(x, x.shape(), x.dtype());
  dim = normalize_dim(dim, x.dim(), "index_select");
  Tensor xc = materialize(x, x.shape(), x.dtype());
  Tensor ic = materialize(index, index.shape(), DType::i64);
  Tensor y = empty(out.shape, out.dtype);
  std::int64_t outer = numel(Shape(x.shape().begin(), x.shape().begin() + dim));
  std::int64_t inner = numel(Shape(x.shape().begin() + dim + 1, x.shape().end()));
  std::int64_t size = x.shape()[dim], count = index.numel();
  std::size_t row = inner * itemsize(x.dtype());
  const auto* ip = static_cast<const std::int64_t*>(ic.raw_data());
  const char* src = static_cast<const char*>(xc.raw_data());
  char* dst = static_cast<char*>(y.raw_data());
  for (std::int64_t j = 0; j < count; ++j) checked_index(ip[j], size, "index_select", dim);
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t j = 0; j < count; ++j)
      std::memcpy(dst + (o * count + j) * row, src + (o * size + ip[j]) * row, row);
  return y;
}

namespace {

// Accumulates in the compute dtype so f16/bf16 sums round once.
template <typename Fn>
Tensor accumulate_into_copy(const Tensor& self, const Tensor& src, Fn&& body) {
  DType ct = compute_dtype(self.dtype());
  Tensor acc = materialize(self, self.shape(), ct);
  if (acc.same(self)) acc = materialize_copy(self, ct);
  Tensor sc = materialize(src, src.shape(), ct);
  visit_dtype(ct, [&](auto tag) {
    using T = decltype(tag);
    body(static_cast<T*>(acc.raw_data()), static_cast<const T*>(sc.raw_data()), sc.strides());
  });
  return acc.dtype() == self.dtype() ? acc : materialize(acc, acc.shape(), self.dtype());
}

}  // namespace

Tensor scatter_add(const Tensor& self, const Tensor& index, const Tensor& src, std::int64_t dim) {
  dim = normalize_dim(dim, self.dim(), "scatter_add");
  Tensor ic = materialize(index, index.shape(), DType::i64);
  const auto* ip = static_cast<const std::int64_t*>(ic.raw_data());
  Strides self_strides = contiguous_strides(self.shape());
  return accumulate_into_copy(self, src, [&](auto* acc, const auto* s, const Strides& ss) {
    for_each_position(index.shape(), [&](std::int64_t i, const std::vector<std::int64_t>& idx) {
      std::int64_t j = checked_index(ip[i], self.shape()[dim], "scatter_add", dim);
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(*acc)>, bool>)
        acc[dot(idx, self_strides, dim, j)] |= s[dot(idx, ss, dim, idx[dim])];
      else
        acc[dot(idx, self_strides, dim, j)] += s[dot(idx, ss, dim, idx[dim])];
    });
  });
}

Tensor index_add(const Tensor& self, const Tensor& index, const Tensor& src, std::int64_t dim) {
  if (self.dim() == 0) return scatter_add(self, make_view(index, {}, {}, index.offset()), src, 0);
  dim = normalize_dim(dim, self.dim(), "index_add");
  Tensor ic = materialize(index, index.shape(), DType::i64);
  const auto* ip = static_cast<const std::int64_t*>(ic.raw_data());
  std::int64_t outer = numel(Shape(self.shape().begin(), self.shape().begin() + dim));
  std::int64_t inner = numel(Shape(self.shape().begin() + dim + 1, self.shape().end()));
  std::int64_t size = self.shape()[dim], count = index.numel();
  for (std::int64_t j = 0; j < count; ++j) checked_index(ip[j], size, "index_add", dim);
  return accumulate_into_copy(self, src, [&](auto* acc, const auto* s, const Strides&) {
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t j = 0; j < count; ++j)
        for (std::int64_t i = 0; i < inner; ++i) {
          if constexpr (std::is_same_v<std::remove_cvref_t<decltype(*acc)>, bool>)
            acc[(o * size + ip[j]) * inner + i] |= s[(o * count + j) * inner + i];
          else
            acc[(o * size + ip[j]) * inner + i] += s[(o * count + j) * inner + i];
        }
  });
}

namespace {

// The slice of `t` at `at` along `dim`, as select views it.
Tensor slice_at(const Tensor& t, std::int64_t dim, std::int64_t at) {
  Shape shape = t.shape();
  Strides strides = t.strides();
  const std::int64_t offset = t.offset() + at * strides[dim];
  shape.erase(shape.begin() + dim);
  strides.erase(strides.begin() + dim);
  return make_view(t, std::move(shape), std::move(strides), offset);
}

}  // namespace

Tensor index_copy(const Tensor& self, const Tensor& index, const Tensor& src, std::int64_t dim) {
  Tensor out = materialize_copy(self, self.dtype());  // self has a dim (check_index_copy)
  dim = normalize_dim(dim, self.dim(), "index_copy");
  Tensor ic = materialize(index, index.shape(), DType::i64);
  const auto* ip = static_cast<const std::int64_t*>(ic.raw_data());
  const std::int64_t size = self.shape()[dim], count = index.numel();
  for (std::int64_t j = 0; j < count; ++j) {
    checked_index(ip[j], size, "index_copy", dim);
    copy_into(slice_at(out, dim, ip[j]), slice_at(src, dim, j));  // in order: the last stays
  }
  return out;
}

Tensor cat(std::span<const Tensor> inputs, std::int64_t dim, const TensorMeta& out) {
  dim = normalize_dim(dim, static_cast<std::int64_t>(out.shape.size()), "cat");
  Tensor y = empty(out.shape, out.dtype);
  std::int64_t at = 0;
  for (const auto& t : inputs) {
    Tensor part = make_view(y, t.shape(), y.strides(), at * y.strides()[dim]);
    copy_into(part, t);
    at += t.shape()[dim];
  }
  return y;
}

Tensor pad(const Tensor& x, const OpAttrs& attrs, const TensorMeta& out) {
  Tensor y = empty(out.shape, out.dtype);
  Tensor value = empty({}, DType::f64);
  *value.data<double>() = attrs.value;
  copy_into(y, make_view(value, out.shape, Strides(out.shape.size(), 0), 0));
  // Copy the part of x that survives: a positive amount shifts it inward, a negative one crops.
  Shape kept = x.shape();
  std::int64_t src_offset = x.offset(), dst_offset = 0;
  for (std::size_t i = 0; i < attrs.dims.size() / 2; ++i) {
    std::size_t d = out.shape.size() - 1 - i;
    std::int64_t before = attrs.dims[2 * i];
    std::int64_t skip = std::max<std::int64_t>(0, -before), shift = std::max<std::int64_t>(0, before);
    kept[d] = std::max<std::int64_t>(0, std::min(x.shape()[d] - skip, out.shape[d] - shift));
    src_offset += skip * x.strides()[d];
    dst_offset += shift * y.strides()[d];
  }
  if (numel(kept) > 0)
    copy_into(make_view(y, kept, y.strides(), dst_offset), make_view(x, kept, x.strides(), src_offset));
  return y;
}

}  // namespace kiln::cpu
