// The one dispatch point of kiln: runs a primitive op on the device of its inputs, without
// autograd (autograd/ wraps this). Views are device-independent and handled here; everything
// else goes to the backend registered for the device type.
#pragma once

#include <span>
#include <vector>

#include "runtime/op.h"
#include "runtime/tensor.h"

namespace kiln {

using BackendFn = std::vector<Tensor> (*)(OpId op, std::span<const Tensor> inputs,
                                          const OpAttrs& attrs,
                                          std::span<const TensorMeta> outputs);

// Installs the kernels for a device type (the CPU backend registers itself).
void register_backend(Device::Type type, BackendFn fn);

std::vector<Tensor> dispatch(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs);
inline Tensor dispatch1(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs) {
  return dispatch(op, inputs, attrs)[0];
}

// Writes `src` (converted and broadcast as needed) into the memory of `dst`.
void copy_data(const Tensor& dst, const Tensor& src);

std::vector<TensorMeta> metas_of(std::span<const Tensor> inputs);

}  // namespace kiln
