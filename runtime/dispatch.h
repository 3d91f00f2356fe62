// The one dispatch point of kiln: validates a primitive op's inputs, infers its outputs, and runs
// it without autograd (autograd/record.h wraps this) on the backend of its inputs' device, or
// hands it to the tracer while a function is being traced. Views and transfers are
// device-independent and handled here.
#pragma once

#include <span>
#include <vector>

#include "runtime/backend.h"

namespace kiln {

std::vector<Tensor> dispatch(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs);
// For ops with a single output.
Tensor dispatch1(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs);

// Writes `src` (converted and broadcast as needed) into the memory of `dst`, on any devices.
void copy_data(const Tensor& dst, const Tensor& src);
// A contiguous copy of `t` on `device` (no autograd; Tensor::to(Device) records one).
Tensor transfer(const Tensor& t, Device device);

std::vector<TensorMeta> metas_of(std::span<const Tensor> inputs);

// A view op (OpClass::view) of `x` with output shape `shape`, as dispatch makes it, for callers
// that have validated it already (a warm kernel plan): new strides on the host, no launch, except
// a reshape no strides express, which copies first.
Tensor run_view(OpId op, const Tensor& x, const OpAttrs& attrs, const Shape& shape);

}  // namespace kiln
