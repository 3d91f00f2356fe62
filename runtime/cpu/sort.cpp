// sort and topk on the host: each row along the dim ordered by a stable sort, equal values in
// index order and NaN after every number (first when descending), as PyTorch's stable sort.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>

#include "runtime/cpu/kernels.h"

namespace kiln::cpu {

namespace {

// a comes before b in ascending order: NaN counts as larger than every number.
template <typename T>
bool ascending_before(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

}  // namespace

std::vector<Tensor> sort_along(OpId op, const Tensor& x, const OpAttrs& attrs,
                               std::span<const TensorMeta> out) {
  std::int64_t dim = normalize_dim(attrs.dim, std::max<std::int64_t>(x.dim(), 1), op_name(op));
  DType ct = compute_dtype(x.dtype());
  if (ct == DType::bool_) ct = DType::i64;
  Rows rows = rows_of(x, x.dim() == 0 ? std::vector<std::int64_t>{} : std::vector{dim}, ct);
  std::int64_t keep = op == OpId::topk ? attrs.k : rows.inner;
  Rows kept = rows;  // the output's rows: `keep` entries each
  if (x.dim() > 0) kept.shape.back() = keep;
  Tensor values = empty(kept.shape, ct), indices = empty(kept.shape, DType::i64);
  auto* index_out = static_cast<std::int64_t*>(indices.raw_data());
  std::vector<std::int64_t> order(static_cast<std::size_t>(rows.inner));
  visit_dtype(ct, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16> || std::is_same_v<T, bool>) {
      throw DTypeError(fmt::format("{}: unexpected compute dtype {}", op, ct));
    } else {
      const T* in = static_cast<const T*>(rows.data.raw_data());
      T* value_out = static_cast<T*>(values.raw_data());
      for (std::int64_t r = 0; r < rows.outer; ++r) {
        const T* row = in + r * rows.inner;
        std::iota(order.begin(), order.end(), std::int64_t{0});
        std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
          return attrs.descending ? ascending_before(row[b], row[a])
                                  : ascending_before(row[a], row[b]);
        });
        for (std::int64_t i = 0; i < keep; ++i) {
          value_out[r * keep + i] = row[order[i]];
          index_out[r * keep + i] = order[i];
        }
      }
    }
  });
  Tensor value_result = empty(out[0].shape, out[0].dtype);
  Tensor index_result = empty(out[1].shape, DType::i64);
  scatter_rows(value_result, kept, values);
  scatter_rows(index_result, kept, indices);
  return {value_result, index_result};
}

}  // namespace kiln::cpu
