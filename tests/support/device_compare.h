// Comparing a result computed on the device (or by generated code) with the CPU's.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/op.h"
#include "runtime/tensor.h"

namespace kiln::test {

namespace device_compare_detail {

// The largest error(a, b) over the elements of two tensors of one shape, on any devices; NaNs
// in the same places and equal infinities count as equal. Infinity when the shapes differ or an
// error is NaN.
template <typename Error>
double worst_element(const Tensor& got, const Tensor& want, Error error) {
  if (got.shape() != want.shape()) return INFINITY;
  Tensor a = got.to(Device::cpu()).to(DType::f64).contiguous();
  Tensor b = want.to(Device::cpu()).to(DType::f64).contiguous();
  const double* pa = static_cast<const double*>(a.raw_data());
  const double* pb = static_cast<const double*>(b.raw_data());
  double worst = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    if (std::isnan(pa[i]) && std::isnan(pb[i])) continue;
    if (std::isinf(pb[i]) && pa[i] == pb[i]) continue;
    double e = error(pa[i], pb[i]);
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

}  // namespace device_compare_detail

// The largest |a - b| / (1 + |b|) over the elements of two tensors of one shape, on any
// devices; NaNs in the same places and equal infinities count as equal. Infinity when the
// shapes differ.
inline double relative_error(const Tensor& got, const Tensor& want) {
  return device_compare_detail::worst_element(
      got, want, [](double a, double b) { return std::abs(a - b) / (1 + std::abs(b)); });
}

// The spacing of `dtype`'s values at |x| (one ulp there; the smallest normal's spacing below
// the normals), written out from each format's precision and exponent range.
inline double ulp(DType dtype, double x) {
  int mantissa = 52, min_exponent = -1022;
  switch (dtype) {
    case DType::f16:
      mantissa = 10, min_exponent = -14;
      break;
    case DType::bf16:
      mantissa = 7, min_exponent = -126;
      break;
    case DType::f32:
      mantissa = 23, min_exponent = -126;
      break;
    default:
      break;
  }
  int e = x == 0 || !std::isfinite(x) ? min_exponent : std::max(std::ilogb(x), min_exponent);
  return std::ldexp(1.0, e - mantissa);
}

// The largest |a - b| over two tensors of one shape, in ulps of `dtype` at max(|b|, floor): a
// floor of 0 measures each element at its own magnitude; a floor of 1 measures values below 1 at
// the ulp of 1 (for composites whose small results come from cancellation). NaNs in the same
// places and equal infinities count as equal; infinity when the shapes differ.
inline double ulps_apart(const Tensor& got, const Tensor& want, DType dtype, double floor = 0) {
  return device_compare_detail::worst_element(got, want, [&](double a, double b) {
    return std::abs(a - b) / ulp(dtype, std::max(std::abs(b), floor));
  });
}

// How far one op's output on the device may be from the CPU's, in ulps of its dtype at
// max(|reference|, single_op_floor(op, dtype)). f16 and bf16: the CPU computes in f32 and rounds
// once (correctly rounded but for ties of the f32 value), and so does the kernel, from f32
// results a few f32 ulps apart: at most one f16/bf16 ulp. f32 and f64: CUDA's libm is within 2
// ulps of the correctly rounded result (powf 4), and so is the CPU's.
inline double single_op_ulps(OpId op, DType dtype) {
  if (dtype == DType::f16 || dtype == DType::bf16) return 1;
  // Attention chains two products, an exp and a row sum: each path rounds its own way.
  if (op_class(op) == OpClass::attention || op == OpId::cached_attention) return 64;
  // A normal draw in f64: the CPU's cos(2 pi u) is the far one, its argument rounded by up to
  // half an ulp of 2 pi, which r (up to 5.8) turns into ~12 ulps of 1 near a zero of the cosine.
  if (op == OpId::random_normal && dtype == DType::f64) return 16;
  return 4;
}
// Ops whose result is a difference of larger terms (gelu's 1 + erf(x) at negative x,
// log_softmax's x - max - log(sum), a dot product's or a sum's terms of both signs) lose
// relative accuracy where the result is small, on the CPU as on the device: their results below
// 1 are measured in ulps of 1. Every other result, in ulps of itself.
inline double single_op_floor(OpId op, DType dtype) {
  (void)dtype;
  switch (op) {
    case OpId::gelu:
    case OpId::gelu_tanh:
    case OpId::log_softmax:
    case OpId::matmul:
    case OpId::sum:
    case OpId::cumsum:
    case OpId::prod:
    case OpId::scatter_add:
    case OpId::index_add:
    case OpId::attention:
    case OpId::attention_backward:
    case OpId::cached_attention:
    case OpId::random_normal:  // r times a cosine near its zero
      return 1;
    case OpId::sort:  // exact: the input's own values
    case OpId::topk:
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
    case OpId::random_int:
    case OpId::amax:
    case OpId::amin:
    case OpId::argmax:
    case OpId::argmin:
    case OpId::max_dim:
    case OpId::min_dim:
    case OpId::softmax:
    case OpId::reshape:
    case OpId::permute:
    case OpId::expand:
    case OpId::slice:
    case OpId::detach:
    case OpId::gather:
    case OpId::index_select:
    case OpId::index_copy:
    case OpId::cat:
    case OpId::pad:
    case OpId::to_device:
      return 0;
  }
  return 0;
}

// Why output `got` of `op` on the device is not the CPU's `want`, or "": integers and bools
// must be equal, floating values within single_op_ulps at single_op_floor.
inline std::string single_op_mismatch(OpId op, const Tensor& got, const Tensor& want) {
  const DType out = want.dtype();
  if (!is_floating(out))
    return relative_error(got, want) == 0.0 ? "" : "integer or bool outputs differ";
  double ulps = ulps_apart(got, want, out, single_op_floor(op, out));
  if (ulps <= single_op_ulps(op, out)) return "";
  return std::to_string(ulps) + " ulps apart, more than " + std::to_string(single_op_ulps(op, out));
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
