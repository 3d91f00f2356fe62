// Kernels whose source is rendered when first needed, then resolved like any other KernelHandle
// (by code, through memory, the disk cache or NVRTC): the variants of one kernel that a launch
// picks among by its schedule (a reduction's forms and layouts, a GEMM's tensor-core tiles), and
// kernels named by what they compute (an optimizer's update for one dtype group, an attention
// kernel for one head dim), rendered once per process. The one way a kernel that is not a fixed
// source gets its handle.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "jit/codegen/kernel_cache.h"

namespace kiln::jit::codegen {

// `count` slots of one kernel; a slot's handle is made (its source rendered) by the first get()
// that asks for it. Copies share the slots. A warm get() is one acquire load: it builds no
// std::function and enters no std::call_once (whose libstdc++ form sets thread-locals each call).
class KernelVariants {
 public:
  KernelVariants() = default;
  KernelVariants(std::string name, int count);

  // The handle of `slot`, made by `make` the first time.
  template <typename Make>
  const KernelHandle& get(int slot, Make&& make) const {
    if (const KernelHandle* h = made(slot)) return *h;
    return make_slot(slot, std::function<KernelHandle()>(std::forward<Make>(make)));
  }
  // Whether `slot` was rendered (a plan's first call compiles those ahead).
  bool rendered(int slot) const;
  // True for the first caller only: what a launch reports once per variant (KILN_LOG=kernels).
  bool first_launch(int slot) const;
  int count() const;

 private:
  struct Slots;
  std::shared_ptr<Slots> slots_;

  const KernelHandle* made(int slot) const;  // null until the slot's handle is made
  const KernelHandle& make_slot(int slot, const std::function<KernelHandle()>& make) const;
};

// The process's kernel named `name`, rendered by `render` on first use. The name must say
// everything the source depends on (dtypes, head dims, update rule), as kernel names do.
const KernelHandle& kernel_by_name(const std::string& name,
                                   const std::function<std::string()>& render);

}  // namespace kiln::jit::codegen
