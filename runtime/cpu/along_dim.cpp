// Kernels that work along one dim, row by row after moving it innermost: max/min with indices,
// cumsum, softmax and log_softmax. f16/bf16 compute in f32 and round once.
#include <cmath>
#include <limits>
#include <type_traits>

#include "runtime/cpu/kernels.h"

namespace kiln::cpu {

namespace {

template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  else return false;
}

// Visits every row of `rows` as (row index, pointer to its `inner` contiguous values of T).
template <typename T, typename Fn>
void for_each_row(const Rows& rows, Fn&& fn) {
  const T* base = static_cast<const T*>(rows.data.raw_data());
  for (std::int64_t r = 0; r < rows.outer; ++r) fn(r, base + r * rows.inner);
}

}  // namespace

std::vector<Tensor> extreme_along(OpId op, const Tensor& x, std::int64_t dim,
                                  std::span<const TensorMeta> out) {
  dim = normalize_dim(dim, x.dim(), op_name(op));
  DType ct = compute_dtype(x.dtype());
  if (ct == DType::bool_) ct = DType::i64;
  Rows rows = rows_of(x, x.dim() == 0 ? std::vector<std::int64_t>{} : std::vector{dim}, ct);
  Tensor values = empty(out[0].shape, ct), indices = empty(out[1].shape, DType::i64);
  auto* index_out = static_cast<std::int64_t*>(indices.raw_data());
  bool want_max = op == OpId::max_dim;
  visit_dtype(ct, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16> || std::is_same_v<T, bool>) {
      throw DTypeError(fmt::format("{}: unexpected compute dtype {}", op, ct));
    } else {
      T* value_out = static_cast<T*>(values.raw_data());
      for_each_row<T>(rows, [&](std::int64_t r, const T* row) {
        std::int64_t best = 0;
        for (std::int64_t i = 1; i < rows.inner && !is_nan(row[best]); ++i)
          if (is_nan(row[i]) || (want_max ? row[i] > row[best] : row[i] < row[best])) best = i;
        value_out[r] = row[best];
        index_out[r] = best;
      });
    }
  });
  if (values.dtype() != out[0].dtype) values = materialize(values, values.shape(), out[0].dtype);
  return {values, indices};
}

Tensor cumsum(const Tensor& x, std::int64_t dim, bool reverse, const TensorMeta& out) {
  if (x.dim() == 0) return materialize_copy(x, out.dtype);
  dim = normalize_dim(dim, x.dim(), "cumsum");
  DType ct = compute_dtype(out.dtype);
  Rows rows = rows_of(x, {dim}, ct);
  Tensor computed = empty(rows.shape, ct);
  visit_dtype(ct, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16> || std::is_same_v<T, bool>) {
      throw DTypeError(fmt::format("cumsum: unexpected compute dtype {}", ct));
    } else {
      // Integers accumulate unsigned: overflow wraps (as PyTorch's) instead of being undefined.
      using Acc = typename std::conditional_t<std::is_integral_v<T>, std::make_unsigned<T>,
                                              std::type_identity<T>>::type;
      T* dst = static_cast<T*>(computed.raw_data());
      for_each_row<T>(rows, [&](std::int64_t r, const T* row) {
        Acc acc = 0;
        for (std::int64_t k = 0; k < rows.inner; ++k) {
          std::int64_t i = reverse ? rows.inner - 1 - k : k;
          acc += static_cast<Acc>(row[i]);
          dst[r * rows.inner + i] = static_cast<T>(acc);
        }
      });
    }
  });
  Tensor y = empty(out.shape, out.dtype);
  scatter_rows(y, rows, computed);
  return y;
}

Tensor softmax(OpId op, const Tensor& x, std::int64_t dim, const TensorMeta& out) {
  dim = normalize_dim(dim, x.dim(), op_name(op));
  DType ct = compute_dtype(out.dtype);
  Rows rows = rows_of(x, x.dim() == 0 ? std::vector<std::int64_t>{} : std::vector{dim}, ct);
  Tensor computed = empty(rows.shape, ct);
  bool log_form = op == OpId::log_softmax;
  visit_dtype(ct, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_floating_point_v<T>) {
      throw DTypeError(fmt::format("{}: unexpected compute dtype {}", op, ct));
    } else {
      T* dst = static_cast<T*>(computed.raw_data());
      for_each_row<T>(rows, [&](std::int64_t r, const T* row) {
        T* y = dst + r * rows.inner;
        // Shifting by the row's max keeps exp() finite; the result does not depend on it.
        T m = -std::numeric_limits<T>::infinity();
        for (std::int64_t i = 0; i < rows.inner; ++i) m = is_nan(row[i]) || row[i] > m ? row[i] : m;
        T sum = 0;
        for (std::int64_t i = 0; i < rows.inner; ++i) sum += std::exp(row[i] - m);
        T log_sum = std::log(sum);
        for (std::int64_t i = 0; i < rows.inner; ++i)
          y[i] = log_form ? row[i] - m - log_sum : std::exp(row[i] - m) / sum;
      });
    }
  });
  Tensor y = empty(out.shape, out.dtype);
  scatter_rows(y, rows, computed);
  return y;
}

}  // namespace kiln::cpu
