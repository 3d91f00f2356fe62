// The list updates of foreach.h: checks, aliasing, then the fused launch and the one-by-one rest.
#include "autograd/foreach.h"

#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "autograd/ops.h"
#include "runtime/error.h"
#include "runtime/grad_mode.h"
#include "runtime/multi_tensor.h"

namespace kiln {

namespace {

// Whether the fused accumulation may take an entry (runtime/multi_tensor.h's promise): it writes
// without recording history and reads and writes contiguous floating-point memory.
bool fusable(const Tensor& self, const Tensor& other) {
  bool history = grad_enabled() && (self.requires_grad() || other.requires_grad());
  return !history && is_floating(self.dtype()) && is_floating(other.dtype()) &&
         (self.numel() == 0 || self.is_contiguous());
}

}  // namespace

void foreach_add_(std::span<const Tensor> selves, std::span<const Tensor> others) {
  KILN_CHECK(selves.size() == others.size(), "foreach_add_: {} tensors but {} to add",
             selves.size(), others.size());
  for (std::size_t i = 0; i < selves.size(); ++i) {
    KILN_CHECK(selves[i].defined() && others[i].defined(),
               "foreach_add_: entry {} has an undefined tensor", i);
    KILN_CHECK(selves[i].shape() == others[i].shape() && selves[i].device() == others[i].device(),
               "foreach_add_: entry {} adds {} {} on {} into {} {} on {}", i,
               dtype_name(others[i].dtype()), shape_str(others[i].shape()),
               others[i].device().str(), dtype_name(selves[i].dtype()),
               shape_str(selves[i].shape()), selves[i].device().str());
  }
  if (selves.empty()) return;
  // An addend in memory that the call writes is copied first, so that no entry reads another's
  // result, whatever order the kernel's blocks run in.
  std::unordered_set<const Storage*> written;
  for (const auto& s : selves) written.insert(s.impl().storage.get());
  std::vector<Tensor> addends(others.begin(), others.end());
  for (auto& a : addends)
    if (written.count(a.impl().storage.get())) a = a.clone();

  const Device device = selves[0].device();
  // The one cached device table below lives on the first device: lists elsewhere go one by one.
  MultiTensorBackend* backend = device.index == 0 ? multi_tensor_backend(device.type) : nullptr;
  std::vector<Tensor> fused_selves, fused_addends;
  std::vector<std::size_t> one_by_one;
  // A storage written by two entries may overlap: its later entries wait for the launch.
  std::unordered_set<const Storage*> in_launch;
  for (std::size_t i = 0; i < selves.size(); ++i) {
    const Tensor& s = selves[i];
    if (backend && s.device() == device && fusable(s, addends[i]) &&
        in_launch.insert(s.impl().storage.get()).second) {
      fused_selves.push_back(s);
      fused_addends.push_back(addends[i].is_contiguous() ? addends[i] : addends[i].contiguous());
    } else {
      one_by_one.push_back(i);
    }
  }
  if (!fused_selves.empty()) {
    // One cache for every caller: a training loop accumulates into the same gradients' addresses
    // each step, so the table stays on the device; another list uploads its own.
    static std::mutex mutex;
    static std::unique_ptr<MultiTensorCache> cache;
    {
      std::lock_guard lock(mutex);
      backend->accumulate(fused_selves, fused_addends, cache);
    }
    for (const auto& s : fused_selves) s.impl().storage->bump_version();
  }
  for (std::size_t i : one_by_one) {
    Tensor s = selves[i];
    const Tensor& a = addends[i];
    s.add_(a.dtype() == s.dtype() ? a : a.to(s.dtype()));
  }
}

}  // namespace kiln
