// Strided, converting copies: the one place CPU kernels touch non-contiguous memory. Every other
// kernel materializes its inputs contiguous and computes with Eigen on flat arrays.
#include <algorithm>
#include <cstring>

#include "runtime/cpu/kernels.h"

namespace kiln::cpu {

namespace {

template <typename To, typename From>
To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    // Compare in the source type: narrowing first would turn a tiny f64 (1e-50) into false.
    if constexpr (std::is_same_v<From, f16> || std::is_same_v<From, bf16>)
      return static_cast<float>(v) != 0.0f;
    else
      return v != From(0);
  } else if constexpr (std::is_same_v<To, std::int8_t> && !std::is_integral_v<From>) {
    // Through i64, wrapping as integers narrow (a float past i8's range is undefined in C++).
    return static_cast<To>(static_cast<std::int64_t>(static_cast<double>(v)));
  } else if constexpr (std::is_same_v<From, f16> || std::is_same_v<From, bf16>) {
    return static_cast<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, f16> || std::is_same_v<To, bf16>) {
    return static_cast<To>(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// Walks two equally shaped strided views in row-major order; the innermost dim is a tight loop.
template <typename To, typename From>
void strided_copy(To* dst, const Strides& ds, const From* src, const Strides& ss,
                  const Shape& shape) {
  std::int64_t n = numel(shape);
  if (n == 0) return;
  if (shape.empty()) {
    dst[0] = convert<To>(src[0]);
    return;
  }
  std::size_t rank = shape.size();
  std::int64_t inner = shape[rank - 1], dsi = ds[rank - 1], ssi = ss[rank - 1];
  std::vector<std::int64_t> index(rank, 0);
  std::int64_t doff = 0, soff = 0;
  for (std::int64_t row = 0; row < n / inner; ++row) {
    for (std::int64_t i = 0; i < inner; ++i) dst[doff + i * dsi] = convert<To>(src[soff + i * ssi]);
    for (std::size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < shape[d]) {
        doff += ds[d];
        soff += ss[d];
        break;
      }
      doff -= ds[d] * (shape[d] - 1);
      soff -= ss[d] * (shape[d] - 1);
      index[d] = 0;
    }
  }
}

}  // namespace

void copy_into(const Tensor& dst, const Tensor& src) {
  KILN_CHECK_AS(ShapeError, dst.shape() == src.shape(), "copy: shape {} cannot be copied into {}",
                shape_str(src.shape()), shape_str(dst.shape()));
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    std::memcpy(dst.raw_data(), src.raw_data(), dst.numel() * itemsize(dst.dtype()));
    return;
  }
  visit_dtype(dst.dtype(), [&](auto to_tag) {
    using To = decltype(to_tag);
    visit_dtype(src.dtype(), [&](auto from_tag) {
      using From = decltype(from_tag);
      strided_copy(static_cast<To*>(dst.raw_data()), dst.strides(),
                   static_cast<const From*>(src.raw_data()), src.strides(), dst.shape());
    });
  });
}

Tensor materialize(const Tensor& x, const Shape& shape, DType dtype) {
  if (x.shape() == shape && x.dtype() == dtype && x.is_contiguous()) return x;
  Tensor src = x;
  if (x.shape() != shape) {
    // Broadcast by zero strides (shapes were validated by infer_meta).
    Strides s(shape.size(), 0);
    std::size_t lead = shape.size() - x.shape().size();
    for (std::size_t i = lead; i < shape.size(); ++i)
      s[i] = x.shape()[i - lead] == shape[i] ? x.strides()[i - lead] : 0;
    src = make_view(x, shape, s, x.offset());
  }
  Tensor out = empty(shape, dtype);
  copy_into(out, src);
  return out;
}

Tensor materialize_copy(const Tensor& x, DType dtype) {
  Tensor out = empty(x.shape(), dtype);
  copy_into(out, x);
  return out;
}

Rows rows_of(const Tensor& x, const std::vector<std::int64_t>& dims, DType dtype) {
  Rows r;
  for (std::int64_t d = 0; d < x.dim(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) r.order.push_back(d);
  for (auto d : dims) {
    r.order.push_back(d);
    r.inner *= x.shape()[d];
  }
  Strides strides;
  for (auto d : r.order) {
    r.shape.push_back(x.shape()[d]);
    strides.push_back(x.strides()[d]);
  }
  r.outer = r.inner == 0 ? 0 : x.numel() / r.inner;
  if (x.dim() == 0) r.outer = 1;
  r.data = materialize(make_view(x, r.shape, strides, x.offset()), r.shape, dtype);
  return r;
}

void scatter_rows(const Tensor& out, const Rows& rows, const Tensor& computed) {
  Strides strides;
  for (auto d : rows.order) strides.push_back(out.strides()[d]);
  copy_into(make_view(out, rows.shape, strides, out.offset()),
            make_view(computed, rows.shape, contiguous_strides(rows.shape), computed.offset()));
}

}  // namespace kiln::cpu
