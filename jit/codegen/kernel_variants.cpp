// Kernels rendered when first needed (see kernel_variants.h).
#include "jit/codegen/kernel_variants.h"

#include <map>
#include <mutex>
#include <vector>

#include "jit/codegen/launch_stats.h"
#include "runtime/error.h"

namespace kiln::jit::codegen {

struct KernelVariants::Slots {
  std::string name;
  std::vector<std::once_flag> once;
  std::vector<KernelHandle> handles;
  // Set once a slot's handle is made (read without the once flag: rendered() may race get()).
  std::vector<std::atomic<bool>> made, launched;
  Slots(std::string n, int count)
      : name(std::move(n)), once(count), handles(count), made(count), launched(count) {}
};

KernelVariants::KernelVariants(std::string name, int count)
    : slots_(std::make_shared<Slots>(std::move(name), count)) {}

const KernelHandle* KernelVariants::made(int slot) const {
  return rendered(slot) ? &slots_->handles[slot] : nullptr;
}

const KernelHandle& KernelVariants::make_slot(int slot,
                                              const std::function<KernelHandle()>& make) const {
  KILN_CHECK(slots_ && slot >= 0 && slot < count(), "codegen: no variant {} of kernel '{}'", slot,
             slots_ ? slots_->name : std::string("(none)"));
  Slots& s = *slots_;
  std::call_once(s.once[slot], [&] {
    s.handles[slot] = make();
    s.made[slot].store(true, std::memory_order_release);
  });
  return s.handles[slot];
}

bool KernelVariants::rendered(int slot) const {
  return slots_ && slot >= 0 && slot < count() &&
         slots_->made[slot].load(std::memory_order_acquire);
}

bool KernelVariants::first_launch(int slot) const {
  return slots_ && slot >= 0 && slot < count() && !slots_->launched[slot].exchange(true);
}

int KernelVariants::count() const {
  return slots_ ? static_cast<int>(slots_->handles.size()) : 0;
}

const KernelHandle& kernel_by_name(const std::string& name,
                                   const std::function<std::string()>& render) {
  static std::mutex mutex;
  // Never destroyed: handles outlive static destructors that may still launch.
  static auto* handles = new std::map<std::string, KernelHandle>;
  std::lock_guard lock(mutex);
  ++launch_stats().named_lookups;
  auto it = handles->find(name);
  if (it == handles->end()) it = handles->emplace(name, KernelHandle(name, render())).first;
  return it->second;
}

}  // namespace kiln::jit::codegen
