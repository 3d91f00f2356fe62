// Control flow: bra, call / ret (through the param stack), exit, trap; block barriers
// (bar/barrier .sync .arrive .red) which park the thread for the scheduler; and the
// instructions that need no work on an in-order interpreter (membar, fence, nanosleep, ...).
#include <fmt/format.h>

#include "runtime/cuda/virtual/builtins.h"
#include "runtime/cuda/virtual/collective.h"
#include "runtime/cuda/virtual/ops_util.h"

namespace kiln::cuda::vgpu {
namespace {

constexpr std::uint64_t kMaxBackBranches = 1ull << 28;

void bra_op(ThreadState& t, const Instr& in) {
  auto target = static_cast<std::uint32_t>(in.imm);
  // A thread runs until it parks; one spinning on a flag another thread sets would run forever.
  if (target < t.pc && ++t.back_branches > kMaxBackBranches)
    fault(t, in,
          fmt::format("thread took more than {} backward branches without exiting or reaching a "
                      "barrier: an endless loop, or a spin-wait on memory another thread writes "
                      "(the virtual GPU runs one thread at a time between barriers and warp "
                      "collectives, so such a wait never ends)",
                      kMaxBackBranches));
  t.pc = target;
}

void call_op(ThreadState& t, const Instr& in) {
  const Function& callee = *in.callee;
  const CallSite& cs = t.frames.back().fn->calls[in.aux];
  if (callee.is_extern) {
    call_builtin(t, in, callee, cs);
    return;
  }
  if (t.frames.size() >= 1024) fault(t, in, "call stack deeper than 1024 frames");
  std::uint64_t base = (t.param_top + 15) / 16 * 16;
  std::uint64_t need = base + callee.param_frame_bytes;
  if (t.params.size() < need) t.params.resize(need * 2);
  for (std::size_t i = 0; i < cs.arg_slots.size() && i < callee.params.size(); ++i) {
    std::uint64_t src = t.r[cs.arg_slots[i]] + static_cast<std::uint64_t>(cs.arg_offsets[i]);
    const ParamSlot& p = callee.params[i];
    const std::uint8_t* from = resolve(t, in, Space::param, src, 1, Access::load);
    if (src - kParamStackBase + p.size > t.param_top)
      fault(t, in, fmt::format("call argument {} reads past the caller's param space", i));
    std::memcpy(t.params.data() + base + p.offset, from, p.size);
  }
  enter_frame(t, callee, t.pc, &cs, kParamStackBase + base);  // saves and raises param_top
}

void ret_op(ThreadState& t, const Instr& in) {
  (void)in;
  if (t.frames.size() <= 1) {
    t.status = Status::exited;
    return;
  }
  Frame f = t.frames.back();
  t.frames.pop_back();
  const Frame& caller = t.frames.back();
  t.r = t.regs.data() + caller.reg_base;
  t.code = caller.fn->code.data();
  t.pc = f.return_pc;
  if (f.site && f.site->has_ret && !f.fn->retvals.empty()) {
    const ParamSlot& rv = f.fn->retvals[0];
    std::uint64_t dst =
        t.r[f.site->ret_slot] + static_cast<std::uint64_t>(f.site->ret_offset) - kParamStackBase;
    std::uint64_t src = f.param_base - kParamStackBase + rv.offset;
    std::memmove(t.params.data() + dst, t.params.data() + src, rv.size);
  }
  t.local_top = f.saved_local_top;
  t.param_top = f.saved_param_top;
}

void exit_op(ThreadState& t, const Instr&) {
  t.status = Status::exited;
}
void trap_op(ThreadState& t, const Instr& in) {
  fault(t, in, "trap: the kernel executed a trap instruction (e.g. __trap() or a failed check)");
}
void nop(ThreadState&, const Instr&) {}

// membar.gl / fence at gpu or system scope: counted for global racecheck's fence-and-flag rule.
void fence_op(ThreadState& t, const Instr&) {
  ++t.block->fences;
  ++t.block->sync_ops;
}

void bar_op(ThreadState& t, const Instr& in) {
  std::uint32_t id = get<std::uint32_t>(t, in.s[0]);
  if (id >= 16) fault(t, in, fmt::format("barrier id {} is out of range 0..15", id));
  std::uint32_t count = in.aux ? get<std::uint32_t>(t, in.s[1]) : 0;
  if (in.aux && (count == 0 || count % 32 != 0))
    fault(t, in, fmt::format("barrier thread count {} is not a positive multiple of 32", count));
  if (in.mod == kBarArrive) {
    ++t.block->bar_arrived[id];
    t.bar_id = id;
    return;
  }
  t.status = Status::barrier;
  t.wait = &in;
  t.bar_id = id;
  t.bar_count = count;
  t.bar_pred = in.mod == kBarRed ? get_pred(t, in, 2) : false;
}

}  // namespace

void add_control_decoders(DecoderTable& table) {
  table["bra"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    info.take("uni");
    in.fn = bra_op;
    in.flags |= kFlagMayStop;
    in.imm = c.label(c.op(0));
  };
  table["call"] = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    info.take("uni");
    CallSite cs;
    std::size_t i = 0;
    if (c.op(0).kind == ast::Operand::kList) {
      const ast::Operand& rets = c.op(0);
      if (rets.elems.size() > 1) c.fail("more than one return value");
      if (rets.elems.size() == 1) {
        SymAddr a;
        if (!c.symbol(rets.elems[0], a) || a.space != Space::param)
          c.fail("return value must be a .param variable");
        cs.ret_slot = a.base;
        cs.ret_offset = a.offset;
        cs.has_ret = true;
      }
      ++i;
    }
    const ast::Operand& target = c.op(i++);
    if (target.kind != ast::Operand::kName) c.fail("bad call target");
    const Function* callee = c.function(target.name);
    if (callee->is_entry) c.fail("call of a kernel");
    if (i < c.nops() && c.op(i).kind == ast::Operand::kList) {
      for (const auto& arg : c.op(i).elems) {
        SymAddr a;
        if (!c.symbol(arg, a) || a.space != Space::param)
          c.fail("call arguments must be .param variables");
        cs.arg_slots.push_back(a.base);
        cs.arg_offsets.push_back(a.offset);
      }
      ++i;
    }
    if (i < c.nops())
      c.fail(
          "indirect calls (call through a register / prototype) are not "
          "supported");
    in.callee = callee;
    in.aux = c.add_call(std::move(cs));
    in.fn = call_op;
    in.flags |= kFlagMayStop;
  };
  table["ret"] = [](DecodeCtx&, OpcodeParts& info, Instr& in) {
    info.take("uni");
    in.fn = ret_op;
    in.flags |= kFlagMayStop;
  };
  table["exit"] = [](DecodeCtx&, OpcodeParts&, Instr& in) {
    in.fn = exit_op;
    in.flags |= kFlagMayStop;
  };
  table["trap"] = [](DecodeCtx&, OpcodeParts&, Instr& in) { in.fn = trap_op; };
  table["brkpt"] = [](DecodeCtx&, OpcodeParts&, Instr& in) { in.fn = trap_op; };
  auto bar = [](DecodeCtx& c, OpcodeParts& info, Instr& in) {
    if (info.has("warp")) {
      decode_bar_warp_sync(c, info, in);
      return;
    }
    int mode = info.take_one({"sync", "arrive", "red"});
    if (mode < 0) mode = kBarSync;  // plain "bar" is bar.sync
    in.mod = static_cast<std::uint8_t>(mode);
    in.fn = bar_op;
    in.flags |= kFlagMayStop;
    std::size_t i = 0;
    if (mode == kBarRed) {
      int op = info.take_one({"popc", "and", "or"});
      if (op < 0) c.fail("missing reduction");
      in.mod2 = static_cast<std::uint8_t>(op);
      in.type = info.type();
      in.d[0] = c.dst(c.op(i++));
    }
    in.s[0] = c.src(c.op(i++), Type::u32);
    std::size_t remaining = c.nops() - i;
    if ((mode == kBarRed && remaining == 2) || (mode != kBarRed && remaining == 1)) {
      in.s[1] = c.src(c.op(i++), Type::u32);
      in.aux = 1;
    }
    if (mode == kBarRed) in.s[2] = c.pred_src(c.op(i), in, 2);
  };
  table["bar"] = bar;
  table["barrier"] = bar;
  auto ignore_all = [](DecodeCtx&, OpcodeParts& info, Instr& in) {
    for (std::size_t i = 0; i < info.mods.size(); ++i) info.used[i] = true;
    in.fn = nop;
  };
  auto fence = [](DecodeCtx&, OpcodeParts& info, Instr& in) {
    bool cta = info.has("cta");
    for (std::size_t i = 0; i < info.mods.size(); ++i) info.used[i] = true;
    in.fn = cta ? nop : fence_op;  // a block-scope fence orders nothing across blocks
  };
  table["membar"] = fence;
  table["fence"] = fence;
  table["pmevent"] = ignore_all;
  table["griddepcontrol"] = ignore_all;
  table["nanosleep"] = ignore_all;
}

}  // namespace kiln::cuda::vgpu
