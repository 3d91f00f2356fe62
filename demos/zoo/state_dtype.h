// Converts every floating parameter and buffer of a module to another dtype (f32 -> f64 for a
// CPU reference built from the same initial weights). nn::Module moves between devices but has
// no dtype conversion, so this mirrors Module::to(Device) over the slots it exposes.
#pragma once

#include <map>
#include <set>
#include <string>

#include "autograd/nn.h"

namespace kiln::zoo {

// New leaves in the same slots (parameters keep requiring grad; tied tensors stay tied); integer
// and bool buffers are left alone. Build optimizers after converting: they hold the tensors.
inline void convert_floating_state(nn::Module& module, DType dtype) {
  KILN_CHECK(is_floating(dtype), "convert_floating_state: {} is not a floating dtype", dtype);
  NoGradGuard no_grad;
  std::set<std::string> parameter_names;
  for (const auto& [name, t] : module.named_parameters()) parameter_names.insert(name);
  std::map<const TensorImpl*, Tensor> converted;  // keeps tied slots tied
  for (const auto& [name, slot] : module.named_slots()) {
    if (!slot->defined() || !is_floating(slot->dtype()) || slot->dtype() == dtype) continue;
    auto [it, fresh] = converted.try_emplace(&slot->impl());
    if (fresh) {
      it->second = slot->to(dtype).detach();
      // A tied parameter is listed under its first name only; its other slots are parameters too.
      if (slot->requires_grad() || parameter_names.count(name)) it->second.requires_grad_(true);
    }
    // named_slots() hands out the module's own slots read-only; writing them is what
    // Module::to(Device) does from inside.
    *const_cast<Tensor*>(slot) = it->second;
  }
}

}  // namespace kiln::zoo
