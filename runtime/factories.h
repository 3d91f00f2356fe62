// Tensor factories: constants, ranges, and tensors from host data.
#pragma once

#include <initializer_list>
#include <vector>

#include "runtime/tensor.h"

namespace kiln {

Tensor zeros(const Shape& shape, DType dtype = DType::f32);
Tensor ones(const Shape& shape, DType dtype = DType::f32);
Tensor full(const Shape& shape, Scalar value, DType dtype = DType::f32);
// A 0-d tensor holding `value`.
Tensor scalar_tensor(Scalar value, DType dtype = DType::f32);
// [start, end) by `step`; i64 unless a dtype is given.
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::i64);
inline Tensor arange(double end, DType dtype = DType::i64) { return arange(0, end, 1, dtype); }
// `steps` values evenly spaced over [start, end] inclusive.
Tensor linspace(double start, double end, std::int64_t steps, DType dtype = DType::f32);
// An n x m identity (m defaults to n).
Tensor eye(std::int64_t n, std::int64_t m = -1, DType dtype = DType::f32);

// A host tensor converted to `dtype` (no autograd, never traced): for building constants.
Tensor convert(const Tensor& t, DType dtype);

// Copies host values into a new tensor of `shape` (which must hold exactly that many values).
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape);
// A 1-D tensor of the values.
template <typename T>
Tensor from_vector(const std::vector<T>& values) {
  return from_vector(values, Shape{static_cast<std::int64_t>(values.size())});
}
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, DType dtype) {
  Tensor t = from_vector(values, shape);
  return t.dtype() == dtype ? t : convert(t, dtype);
}
// f32 tensors from literals: tensor({1, 2, 3}) is 1-D; tensor({1, 2, 3, 4}, {2, 2}) is 2x2.
inline Tensor tensor(std::initializer_list<float> values) {
  return from_vector(std::vector<float>(values));
}
inline Tensor tensor(std::initializer_list<float> values, const Shape& shape) {
  return from_vector(std::vector<float>(values), shape);
}

// Same shape, dtype and device as t.
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, Scalar value);

}  // namespace kiln
