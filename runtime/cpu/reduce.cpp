// Reductions: move the reduced dims innermost, materialize, and reduce the rows of an
// (outer x inner) row-major Eigen array.
#include <algorithm>
#include <cmath>

#include "runtime/cpu/kernels.h"

namespace kiln::cpu {

namespace {

template <typename T>
using RowMatrix = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  else return false;
}

// Index of the extreme element of a row; NaN wins, as in PyTorch; ties keep the first.
template <typename T, typename Better>
std::int64_t arg_extreme(const T* row, std::int64_t n, Better better) {
  std::int64_t best = 0;
  for (std::int64_t i = 1; i < n; ++i) {
    if (is_nan(row[best])) break;
    if (is_nan(row[i]) || better(row[i], row[best])) best = i;
  }
  return best;
}

}  // namespace

Tensor reduce(OpId op, const Tensor& x, const OpAttrs& attrs, const TensorMeta& out) {
  auto dims = normalize_dims(attrs.dims, x.dim(), op_name(op));
  bool is_arg = op == OpId::argmax || op == OpId::argmin;
  DType ct = compute_dtype(is_arg ? x.dtype() : out.dtype);
  if (ct == DType::bool_) ct = DType::i64;  // amax/amin of bool compute as integers
  Rows rows = rows_of(x, dims, ct);
  std::int64_t outer = rows.inner == 0 ? numel(out.shape) : rows.outer, inner = rows.inner;

  Tensor y = empty(out.shape, is_arg ? DType::i64 : ct);
  visit_dtype(ct, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16> || std::is_same_v<T, bool>) {
      throw DTypeError(fmt::format("{}: unexpected compute dtype {}", op, ct));
    } else {
      const T* src = static_cast<const T*>(rows.data.raw_data());
      auto greater = [](T a, T b) { return a > b; };
      auto less = [](T a, T b) { return a < b; };
      if (is_arg) {
        auto* dst = static_cast<std::int64_t*>(y.raw_data());
        for (std::int64_t r = 0; r < outer; ++r)
          dst[r] = op == OpId::argmax ? arg_extreme(src + r * inner, inner, greater)
                                      : arg_extreme(src + r * inner, inner, less);
        return;
      }
      T* dst = static_cast<T*>(y.raw_data());
      RowMatrix<T> m(src, outer, inner);
      switch (op) {
        case OpId::sum:
          for (std::int64_t r = 0; r < outer; ++r) dst[r] = inner ? m.row(r).sum() : T(0);
          break;
        case OpId::prod:
          for (std::int64_t r = 0; r < outer; ++r) dst[r] = inner ? m.row(r).prod() : T(1);
          break;
        case OpId::amax:
          for (std::int64_t r = 0; r < outer; ++r)
            dst[r] = src[r * inner + arg_extreme(src + r * inner, inner, greater)];
          break;
        case OpId::amin:
          for (std::int64_t r = 0; r < outer; ++r)
            dst[r] = src[r * inner + arg_extreme(src + r * inner, inner, less)];
          break;
        // Arg reductions are handled above; the rest are not reductions
        case OpId::exp:
        case OpId::log:
        case OpId::log1p:
        case OpId::expm1:
        case OpId::sqrt:
        case OpId::rsqrt:
        case OpId::reciprocal:
        case OpId::sin:
        case OpId::cos:
        case OpId::tanh:
        case OpId::sigmoid:
        case OpId::gelu:
        case OpId::gelu_tanh:
        case OpId::silu:
        case OpId::erf:
        case OpId::softplus:
        case OpId::neg:
        case OpId::abs:
        case OpId::relu:
        case OpId::sign:
        case OpId::floor:
        case OpId::ceil:
        case OpId::round:
        case OpId::trunc:
        case OpId::logical_not:
        case OpId::tril:
        case OpId::triu:
        case OpId::add:
        case OpId::sub:
        case OpId::mul:
        case OpId::div:
        case OpId::pow:
        case OpId::maximum:
        case OpId::minimum:
        case OpId::remainder:
        case OpId::floor_divide:
        case OpId::eq:
        case OpId::ne:
        case OpId::lt:
        case OpId::le:
        case OpId::gt:
        case OpId::ge:
        case OpId::logical_and:
        case OpId::logical_or:
        case OpId::where:
        case OpId::cast:
        case OpId::copy:
        case OpId::random_uniform:
        case OpId::random_normal:
        case OpId::random_int:
        case OpId::argmax:
        case OpId::argmin:
        case OpId::max_dim:
        case OpId::min_dim:
        case OpId::cumsum:
        case OpId::softmax:
        case OpId::log_softmax:
        case OpId::sort:
        case OpId::topk:
        case OpId::cached_attention:
        case OpId::reshape:
        case OpId::permute:
        case OpId::expand:
        case OpId::slice:
        case OpId::detach:
        case OpId::gather:
        case OpId::index_select:
        case OpId::scatter_add:
        case OpId::index_add:
        case OpId::index_copy:
        case OpId::matmul:
        case OpId::cat:
        case OpId::pad:
        case OpId::to_device:
        case OpId::attention:
        case OpId::attention_backward:
          throw Error(fmt::format("{}: not a reduction", op));
      }
    }
  });
  if (y.dtype() == out.dtype) return y;
  return materialize(y, y.shape(), out.dtype);
}

}  // namespace kiln::cpu
