// Tensor factories.
#include "runtime/factories.h"

#include <cmath>

#include "runtime/cpu/kernels.h"
#include "runtime/dispatch.h"

namespace kiln {

Tensor full(const Shape& shape, Scalar value, DType dtype) {
  Tensor out = empty(shape, dtype);
  // Integers go through i64 so that large values stay exact.
  Tensor v = value.is_floating() ? empty({}, DType::f64) : empty({}, DType::i64);
  if (value.is_floating())
    *v.data<double>() = value.to_double();
  else
    *v.data<std::int64_t>() = value.to_int();
  cpu::copy_into(out, make_view(v, shape, Strides(shape.size(), 0), 0));
  return out;
}
Tensor zeros(const Shape& shape, DType dtype) {
  return empty(shape, dtype);
}
Tensor ones(const Shape& shape, DType dtype) {
  return full(shape, 1, dtype);
}
Tensor scalar_tensor(Scalar value, DType dtype) {
  return full({}, value, dtype);
}

Tensor arange(double start, double end, double step, DType dtype) {
  KILN_CHECK(step != 0, "arange: step must be nonzero");
  KILN_CHECK((end - start) / step >= 0 || start == end,
             "arange: range [{}, {}) cannot be walked with step {}", start, end, step);
  auto n = static_cast<std::int64_t>(std::ceil((end - start) / step));
  std::vector<double> values(std::max<std::int64_t>(n, 0));
  for (std::int64_t i = 0; i < n; ++i) values[i] = start + static_cast<double>(i) * step;
  return cpu::materialize(from_vector(values), {static_cast<std::int64_t>(values.size())}, dtype);
}

Tensor linspace(double start, double end, std::int64_t steps, DType dtype) {
  KILN_CHECK(steps >= 0, "linspace: steps must be non-negative, got {}", steps);
  std::vector<double> values(steps);
  double delta = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  // Fill from both ends so the last value is exactly `end`, as in PyTorch; a single step is
  // `start`.
  for (std::int64_t i = 0; i < steps; ++i)
    values[i] = i < steps / 2 || steps == 1 ? start + delta * static_cast<double>(i)
                                            : end - delta * static_cast<double>(steps - 1 - i);
  return cpu::materialize(from_vector(values), {steps}, dtype);
}

Tensor eye(std::int64_t n, std::int64_t m, DType dtype) {
  if (m < 0) m = n;
  KILN_CHECK(n >= 0, "eye: n must be non-negative, got {}", n);
  Tensor out = empty({n, m}, DType::f64);
  double* p = out.data<double>();
  for (std::int64_t i = 0; i < std::min(n, m); ++i) p[i * m + i] = 1.0;
  return cpu::materialize(out, {n, m}, dtype);
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
  const Shape& s = shape;
  KILN_CHECK_AS(ShapeError, numel(s) == static_cast<std::int64_t>(values.size()),
                "from_vector: {} values do not fill shape {}", values.size(), shape_str(s));
  Tensor out = empty(s, dtype_of<T>);
  T* p = out.data<T>();
  for (std::size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return out;
}
template Tensor from_vector(const std::vector<bool>&, const Shape&);
template Tensor from_vector(const std::vector<std::int8_t>&, const Shape&);
template Tensor from_vector(const std::vector<std::int32_t>&, const Shape&);
template Tensor from_vector(const std::vector<std::int64_t>&, const Shape&);
template Tensor from_vector(const std::vector<f16>&, const Shape&);
template Tensor from_vector(const std::vector<bf16>&, const Shape&);
template Tensor from_vector(const std::vector<float>&, const Shape&);
template Tensor from_vector(const std::vector<double>&, const Shape&);

Tensor convert(const Tensor& t, DType dtype) {
  KILN_CHECK(t.device().is_cpu(), "convert: expects a host tensor, got one on {}",
             t.device().str());
  return cpu::materialize_copy(t, dtype);
}

// Like PyTorch's *_like, the result lives on t's device. A fresh tensor has no history, so the
// transfer is dispatched without autograd (Tensor::to is autograd's, a layer above).
static Tensor on_device_of(const Tensor& t, Tensor made) {
  if (t.device().is_cpu()) return made;
  OpAttrs attrs;
  attrs.device = t.device();
  const Tensor inputs[] = {made};
  return dispatch1(OpId::to_device, inputs, attrs);
}
Tensor zeros_like(const Tensor& t) {
  return on_device_of(t, zeros(t.shape(), t.dtype()));
}
Tensor ones_like(const Tensor& t) {
  return on_device_of(t, ones(t.shape(), t.dtype()));
}
Tensor full_like(const Tensor& t, Scalar value) {
  return on_device_of(t, full(t.shape(), value, t.dtype()));
}

}  // namespace kiln
