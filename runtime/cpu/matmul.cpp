// Batched matmul with broadcast batch dims: one Eigen GEMM per batch entry.
#include "runtime/cpu/kernels.h"

namespace kiln::cpu {

Tensor matmul(const Tensor& a, const Tensor& b, const TensorMeta& out) {
  std::size_t rank = out.shape.size();
  std::int64_t m = out.shape[rank - 2], n = out.shape[rank - 1], k = a.shape().back();
  Shape a_shape(out.shape.begin(), out.shape.end() - 2), b_shape = a_shape;
  a_shape.insert(a_shape.end(), {m, k});
  b_shape.insert(b_shape.end(), {k, n});
  DType ct = compute_dtype(out.dtype);
  Tensor ac = materialize(a, a_shape, ct), bc = materialize(b, b_shape, ct);
  Tensor y = empty(out.shape, ct);
  std::int64_t batch = numel(Shape(out.shape.begin(), out.shape.end() - 2));
  visit_dtype(ct, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16> || std::is_same_v<T, bool>) {
      throw DTypeError(fmt::format("matmul: unexpected compute dtype {}", ct));
    } else {
      using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
      const T* pa = static_cast<const T*>(ac.raw_data());
      const T* pb = static_cast<const T*>(bc.raw_data());
      T* py = static_cast<T*>(y.raw_data());
      for (std::int64_t i = 0; i < batch; ++i) {
        Eigen::Map<const Mat> ma(pa + i * m * k, m, k), mb(pb + i * k * n, k, n);
        Eigen::Map<Mat> my(py + i * m * n, m, n);
        my.noalias() = ma * mb;
      }
    }
  });
  if (y.dtype() == out.dtype) return y;
  return materialize(y, y.shape(), out.dtype);
}

}  // namespace kiln::cpu
