// Comparing a result computed on the device (or by generated code) with the CPU's.
#pragma once

#include <algorithm>
#include <cmath>

#include "runtime/tensor.h"

namespace kiln::test {

// The largest |a - b| / (1 + |b|) over the elements of two tensors of one shape, on any
// devices; NaNs in the same places and equal infinities count as equal. Infinity when the
// shapes differ.
inline double relative_error(const Tensor& got, const Tensor& want) {
  if (got.shape() != want.shape()) return INFINITY;
  Tensor a = got.to(Device::cpu()).to(DType::f64).contiguous();
  Tensor b = want.to(Device::cpu()).to(DType::f64).contiguous();
  const double* pa = static_cast<const double*>(a.raw_data());
  const double* pb = static_cast<const double*>(b.raw_data());
  double worst = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    if (std::isnan(pa[i]) && std::isnan(pb[i])) continue;
    if (std::isinf(pb[i]) && pa[i] == pb[i]) continue;
    double e = std::abs(pa[i] - pb[i]) / (1 + std::abs(pb[i]));
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

// Tolerance of a generated pointwise kernel against the CPU: CUDA's f32 transcendentals are
// within a few ulps of libm's; f16/bf16 kernels keep f32 intermediates where eager rounds per op.
inline double pointwise_tolerance(DType t) {
  switch (t) {
    case DType::f16:
      return 2e-3;
    case DType::bf16:
      return 1.6e-2;
    case DType::f32:
      return 2e-6;
    case DType::f64:
      return 1e-13;
    default:
      return 0;
  }
}

}  // namespace kiln::test
