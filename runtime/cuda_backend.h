// The CUDA device's backend object as runtime/ knows it: tensor memory from the process-wide
// caching allocator over the CUDA backend KILN_CUDA selects (a real GPU or the virtual GPU), and
// copies between host and device. Its ops need kernels, which come from the code generator:
// jit/ derives from this class and installs its backend in place of this one.
#pragma once

#include "runtime/backend.h"
#include "runtime/cuda/allocator.h"

namespace kiln {

// The allocator behind every CUDA tensor (created on first use).
cuda::CachingAllocator& cuda_allocator();

class CudaBackend : public Backend {
 public:
  std::string_view name() const override { return "cuda"; }
  std::shared_ptr<Storage> allocate(std::size_t nbytes, Device device, bool zero_fill) override;
  // Host <-> device copies of any layout and dtype (the host side converts); device to device
  // for contiguous tensors of one dtype.
  void copy_into(const Tensor& dst, const Tensor& src) override;
  // Raises: this class has no kernels (see the file comment).
  std::vector<Tensor> run(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs,
                          std::span<const TensorMeta> outputs) override;
};

}  // namespace kiln
