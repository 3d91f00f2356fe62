// Thread-level services for the handlers: fault messages, the slow path of address resolution
// (windows, bounds, liveness, alignment) and entering a function frame.
#include <fmt/format.h>

#include "runtime/cuda/virtual/fault.h"
#include "runtime/cuda/virtual/thread.h"

namespace kiln::cuda::vgpu {

std::string where(const ThreadState& t, const Instr* in) {
  const BlockContext& b = *t.block;
  std::string s =
      fmt::format("in kernel '{}' block ({},{},{}) thread ({},{},{})", t.launch->kernel->name,
                  b.ctaid.x, b.ctaid.y, b.ctaid.z, t.tid[0], t.tid[1], t.tid[2]);
  if (in && !t.frames.empty()) {
    const Function* fn = t.frames.back().fn;
    std::ptrdiff_t idx = in - fn->code.data();
    if (idx >= 0 && static_cast<std::size_t>(idx) < fn->text.size()) {
      s += fmt::format(" at PTX line {} ({})", in->line, fn->text[static_cast<std::size_t>(idx)]);
      if (fn != t.launch->kernel) s += fmt::format(" in function '{}'", fn->name);
    } else {
      s += fmt::format(" at PTX line {}", in->line);
    }
  }
  return s;
}

void fault(const ThreadState& t, const Instr& in, const std::string& what) {
  throw KernelFault(fmt::format("{} {}", what, where(t, &in)));
}

namespace {
const char* access_name(Access a) {
  return a == Access::load ? "load" : a == Access::store ? "store" : "atomic";
}
}  // namespace

void access_fault(ThreadState& t, const Instr& in, Space space, std::uint64_t addr, unsigned size,
                  Access access) {
  const MemoryMap& mem = *t.launch->memory;
  bool freed = mem.is_freed(addr) && !mem.find(addr, 1);
  throw KernelFault(fmt::format("{} {} {} of {} bytes at {} {}: {}",
                                freed ? "use-after-free" : "out-of-bounds", space_name(space),
                                access_name(access), size, hex(addr), where(t, &in),
                                mem.explain(addr, size)));
}

namespace {

[[noreturn]] void window_fault(ThreadState& t, const Instr& in, Space space, std::uint64_t addr,
                               std::uint64_t off, unsigned size, Access access, std::uint64_t limit,
                               const char* region) {
  throw KernelFault(fmt::format(
      "out-of-bounds {} {} of {} bytes at {} {}: offset {} is past the "
      "{} bytes of {}",
      space_name(space), access_name(access), size, hex(addr), where(t, &in), off, limit, region));
}

}  // namespace

std::uint8_t* resolve_slow(ThreadState& t, const Instr& in, Space space, std::uint64_t addr,
                           unsigned size, Access access) {
  Space actual = space;
  std::uint64_t off = addr;
  if (space == Space::generic) {
    if (addr < kSharedWindow) {
      actual = Space::global;
    } else if (addr - kSharedWindow < kWindowSize) {
      actual = Space::shared, off = addr - kSharedWindow;
    } else if (addr - kLocalWindow < kWindowSize) {
      actual = Space::local, off = addr - kLocalWindow;
    } else if (addr - kParamWindow < kWindowSize) {
      actual = Space::param, off = addr - kParamWindow;
    } else if (addr - kConstWindow < kWindowSize) {
      actual = Space::const_, off = addr - kConstWindow;
    } else {
      throw KernelFault(
          fmt::format("invalid generic {} of {} bytes at {} {}: the address is in "
                      "no state space's window",
                      access_name(access), size, hex(addr), where(t, &in)));
    }
  }
  if (addr & (size - 1))
    throw KernelFault(
        fmt::format("misaligned {} {} of {} bytes at {} {}: needs {}-byte "
                    "alignment",
                    space_name(space), access_name(access), size, hex(addr), where(t, &in), size));
  switch (actual) {
    case Space::global: {
      const Allocation* a = t.launch->memory->find(addr, size);
      if (!a) access_fault(t, in, space, addr, size, access);
      LaunchContext& l = *t.launch;
      l.hit_lo[l.hit_next] = a->base;
      l.hit_hi[l.hit_next] = a->base + a->size;
      l.hit_shadow[l.hit_next] = a->shadow.get();
      l.hit_next = (l.hit_next + 1) % LaunchContext::kHitEntries;
      if (l.global) check_global_access(t, in, addr, size, access, a->base, a->shadow.get());
      if (l.profiler) profile_global_access(t, addr, size, access);
      return reinterpret_cast<std::uint8_t*>(addr);
    }
    case Space::shared:
      if (off + size > t.block->shared_bytes || off + size < off)
        window_fault(t, in, space, addr, off, size, access, t.block->shared_bytes,
                     "shared memory (static + dynamic) of this block");
      if (t.block->shadow) check_shared_access(t, in, off, size, access);
      if (t.launch->profiler) profile_shared_access(t, off, size, access);
      return t.block->shared.data() + off;
    case Space::local:
      if (off + size > t.local_top || off + size < off)
        window_fault(t, in, space, addr, off, size, access, t.local_top,
                     "this thread's local memory");
      if (t.launch->check_init) check_local_access(t, in, off, size, access);
      return t.local.data() + off;
    case Space::param:
      if (off < kParamStackBase) {
        if (access != Access::load)
          throw KernelFault(fmt::format("{} to a kernel parameter at {} {}", access_name(access),
                                        hex(addr), where(t, &in)));
        if (off + size > t.launch->param_bytes)
          window_fault(t, in, space, addr, off, size, access, t.launch->param_bytes,
                       "kernel parameters");
        return const_cast<std::uint8_t*>(t.launch->params) + off;
      }
      off -= kParamStackBase;
      if (off + size > t.param_top)
        window_fault(t, in, space, addr, off, size, access, t.param_top, "the param stack");
      return t.params.data() + off;
    case Space::const_:
      if (access != Access::load)
        throw KernelFault(fmt::format("{} to constant memory at {} {}", access_name(access),
                                      hex(addr), where(t, &in)));
      if (off + size > t.launch->const_bytes)
        window_fault(t, in, space, addr, off, size, access, t.launch->const_bytes,
                     "the module's constant bank");
      return const_cast<std::uint8_t*>(t.launch->const_bank) + off;
    default:
      break;
  }
  fault(t, in, "bad state space");
}

void enter_frame(ThreadState& t, const Function& fn, std::uint32_t return_pc, const CallSite* site,
                 std::uint64_t param_base) {
  Frame f;
  f.fn = &fn;
  f.return_pc = return_pc;
  f.site = site;
  f.saved_local_top = t.local_top;
  f.saved_param_top = t.param_top;
  if (!t.frames.empty()) {
    const Frame& prev = t.frames.back();
    f.reg_base = prev.reg_base + prev.fn->num_slots;
  }
  std::uint64_t align = std::max<std::uint64_t>(fn.local_align, 16);
  f.local_base = (t.local_top + align - 1) / align * align;
  t.local_top = f.local_base + fn.local_bytes;
  if (t.local.size() < t.local_top) t.local.resize(std::max<std::uint64_t>(t.local_top, 256));
  if (t.launch->check_init && fn.local_bytes) {  // a fresh frame's locals are uninitialized
    if (t.local_init.size() < t.local.size()) t.local_init.resize(t.local.size());
    std::memset(t.local_init.data() + f.local_base, 0, fn.local_bytes);
  }
  f.param_base = param_base;
  std::uint64_t ptop = param_base - kParamStackBase + fn.param_frame_bytes;
  t.param_top = std::max(t.param_top, ptop);
  if (t.params.size() < t.param_top) t.params.resize(std::max<std::uint64_t>(t.param_top, 256));
  if (t.regs.size() < f.reg_base + fn.num_slots) t.regs.resize(f.reg_base + fn.num_slots);
  t.frames.push_back(f);
  std::uint64_t* r = t.regs.data() + f.reg_base;
  t.r = r;
  std::memcpy(r, t.fixed, sizeof(t.fixed));
  r[kSlotLocalBase] = f.local_base;
  r[kSlotParamBase] = param_base;
  std::size_t nconst = fn.consts.size();
  std::size_t nregs = fn.num_slots - nconst;
  std::memset(r + kNumFixedSlots, 0, (nregs - kNumFixedSlots) * sizeof(std::uint64_t));
  if (nconst) std::memcpy(r + nregs, fn.consts.data(), nconst * sizeof(std::uint64_t));
  t.code = fn.code.data();
  t.pc = 0;
}

}  // namespace kiln::cuda::vgpu
