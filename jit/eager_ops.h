// A kernel plan's eager ops with their kernels found once. Dispatch (runtime/dispatch.h) infers
// metadata, checks devices, builds a string signature and takes a lock on every call; the eager
// and host-view steps of a warm plan skip all of it (kernel_plan_run.cpp).
#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "runtime/op.h"
#include "runtime/tensor.h"

namespace kiln::jit {

struct EagerKernel;  // generated_backend.cpp: the one-node plan the CUDA backend runs for an op

// The kernel the CUDA backend runs for `op` on tensors like `inputs` (CUDA tensors and 0-dim CPU
// numbers), or null where the op takes another path there (attention, a transfer, a view).
std::shared_ptr<const EagerKernel> find_eager_kernel(OpId op, std::span<const Tensor> inputs,
                                                     const OpAttrs& attrs,
                                                     std::span<const TensorMeta> outputs);
// index_copy's kernel that writes source's slices over self (inputs[0]) in place, for tensors
// like `inputs` (all on CUDA, none of the others in self's memory), or null; run_eager_kernel
// then returns self.
std::shared_ptr<const EagerKernel> find_index_copy_rows(std::span<const Tensor> inputs,
                                                        const OpAttrs& attrs);
std::vector<Tensor> run_eager_kernel(const EagerKernel& kernel, std::span<const Tensor> inputs,
                                     const OpAttrs& attrs, std::span<const TensorMeta> outputs);

// Per node of a plan's graph, its eager kernel, found on the node's first call: every call of
// one entry's node has one signature (dtypes, ranks and size-1 dims are guarded, and symbolic
// sizes stay >= 2), so the kernel found once serves them all.
class NodeKernels {
 public:
  explicit NodeKernels(std::size_t nodes) : slots_(nodes) {}

  // The node's kernel, from `find()` on its first call (null: the node dispatches).
  template <class Find>
  const EagerKernel* get(int node, Find&& find) {
    Slot& slot = slots_.at(static_cast<std::size_t>(node));
    std::call_once(slot.once, [&] { slot.kernel = find(); });
    return slot.kernel.get();
  }

 private:
  struct Slot {
    std::once_flag once;
    std::shared_ptr<const EagerKernel> kernel;
  };
  std::vector<Slot> slots_;
};

}  // namespace kiln::jit
