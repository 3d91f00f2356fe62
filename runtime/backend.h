// A backend object per device type: where that device's tensors get memory, how primitive ops
// run on them, and how data moves in and out. The CPU registers its Eigen reference kernels
// (runtime/cpu/); CUDA registers memory and copies (runtime/cuda_backend.h), and its kernels come
// from the code generator in jit/, which installs its own CUDA backend at load, so runtime/ never
// depends on jit/.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/linear_epilogue.h"
#include "runtime/op.h"
#include "runtime/tensor.h"

namespace kiln {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // Memory for `nbytes` on `device`, zero-filled when asked (a device memset costs a write of
  // every byte, so outputs a kernel writes in full do not ask).
  virtual std::shared_ptr<Storage> allocate(std::size_t nbytes, Device device, bool zero_fill) = 0;
  // Runs a primitive op (not a view, not a transfer) on validated inputs of this device;
  // `outputs` is the inferred metadata of each output.
  virtual std::vector<Tensor> run(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs,
                                  std::span<const TensorMeta> outputs) = 0;
  // Writes `src` into `dst`: equal shapes, any strides, converting dtype. Each of the two is on
  // this backend's device type or on the CPU.
  virtual void copy_into(const Tensor& dst, const Tensor& src) = 0;

  // matmul + bias + activation as one library call (runtime/linear_epilogue.h), or nullopt when
  // this backend has no such call for these operands: the caller then runs the same math as
  // primitive ops. Autograd reaches cuBLASLt's epilogues through these without including jit/.
  virtual std::optional<LinearForwardResult> linear_forward(const LinearForwardCall&) {
    return std::nullopt;
  }
  virtual std::optional<LinearBackwardResult> linear_backward(const LinearBackwardCall&) {
    return std::nullopt;
  }
  // Overwrites self's slices along `dim` (normalized) named by `index` with source's, in place
  // and nothing else of self (index_copy_ with no history to record); false when this backend
  // has no such kernel for these tensors, and the caller writes index_copy's whole result.
  virtual bool index_copy_into(const Tensor& /*self*/, std::int64_t /*dim*/,
                               const Tensor& /*index*/, const Tensor& /*source*/) {
    return false;
  }
};

// Installs `backend` (which must outlive every tensor) for a device type, replacing one of
// lower or equal priority: the code generator's CUDA backend (priority 1) replaces runtime's
// memory-only one (0) whichever static initializer runs first.
void register_backend(Device::Type type, Backend* backend, int priority = 0);
// The backend of a device type; an Error naming the device when none is registered.
Backend& backend_for(Device::Type type);

}  // namespace kiln
