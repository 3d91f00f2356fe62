// Name resolution and module layout for decoding (see decoder.h): registers to slots,
// immediates to constant slots, variables to addresses, labels to instruction indices.
#include "runtime/cuda/virtual/decoder.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <set>

#include "runtime/cuda/virtual/fault.h"
#include "runtime/cuda/virtual/float_format.h"
#include "runtime/cuda/virtual/issue_cost.h"

namespace kiln::cuda::vgpu {

namespace {

bool ignorable(const std::string& m) {
  static const char* kIgnore[] = {"volatile", "relaxed", "acquire", "release", "acq_rel",
                                  "weak",     "mmio",    "cta",     "gpu",     "sys",
                                  "cluster",  "ca",      "cg",      "cs",      "lu",
                                  "cv",       "wb",      "wt",      "aligned", "sc"};
  for (const char* k : kIgnore)
    if (m == k) return true;
  return m.starts_with("L1::") || m.starts_with("L2::") || m.starts_with("level::");
}

constexpr std::uint32_t kConstTag = 0x80000000u;

std::uint64_t align_up(std::uint64_t v, std::uint64_t a) {
  return a ? (v + a - 1) / a * a : v;
}

struct ModSym {
  SymAddr addr;
};

struct LocalSym {
  bool is_reg = false;
  std::uint32_t slot = 0;
  SymAddr addr;
};

int special_slot(const std::string& n) {
  static const std::unordered_map<std::string, int> kSpecial = {
      {"%tid.x", kSlotTidX},
      {"%tid.y", kSlotTidY},
      {"%tid.z", kSlotTidZ},
      {"%ntid.x", kSlotNtidX},
      {"%ntid.y", kSlotNtidY},
      {"%ntid.z", kSlotNtidZ},
      {"%ctaid.x", kSlotCtaidX},
      {"%ctaid.y", kSlotCtaidY},
      {"%ctaid.z", kSlotCtaidZ},
      {"%nctaid.x", kSlotNctaidX},
      {"%nctaid.y", kSlotNctaidY},
      {"%nctaid.z", kSlotNctaidZ},
      {"%laneid", kSlotLaneId},
      {"%warpid", kSlotWarpId},
      {"%nwarpid", kSlotNWarpId},
      {"%smid", kSlotSmId},
      {"%nsmid", kSlotNSmId},
      {"%gridid", kSlotGridId},
      {"%lanemask_eq", kSlotLanemaskEq},
      {"%lanemask_le", kSlotLanemaskLe},
      {"%lanemask_lt", kSlotLanemaskLt},
      {"%lanemask_ge", kSlotLanemaskGe},
      {"%lanemask_gt", kSlotLanemaskGt},
      {"%dynamic_smem_size", kSlotDynSmem},
      {"%total_smem_size", kSlotTotalSmem},
  };
  auto it = kSpecial.find(n);
  return it == kSpecial.end() ? -1 : it->second;
}

std::string operand_text(const ast::Operand& o) {
  switch (o.kind) {
    case ast::Operand::kName:
      return (o.negated ? "!" : "") + o.name;
    case ast::Operand::kImm:
      return (o.negative ? "-" : "") + o.text;
    case ast::Operand::kMem:
      if (o.name.empty()) return fmt::format("[{}]", o.offset);
      return o.offset ? fmt::format("[{}+{}]", o.name, o.offset) : fmt::format("[{}]", o.name);
    case ast::Operand::kPair:
      return operand_text(o.elems[0]) + "|" + operand_text(o.elems[1]);
    case ast::Operand::kVec:
    case ast::Operand::kList: {
      std::string s = o.kind == ast::Operand::kVec ? "{" : "(";
      for (std::size_t i = 0; i < o.elems.size(); ++i)
        s += (i ? ", " : "") + operand_text(o.elems[i]);
      return s + (o.kind == ast::Operand::kVec ? "}" : ")");
    }
  }
  return "";
}

}  // namespace

void DecodeCtx::fail(const std::string& why) const {
  throw PtxError(fmt::format("unsupported PTX instruction '{}' at line {}: {}",
                             ai ? ai->opcode : "", ai ? ai->line : 0, why));
}

namespace {

class ModuleDecoder final : public DecodeCtx {
 public:
  ModuleDecoder(Program& prog, const DecoderTable& table) : prog_(prog), table_(table) {}

  std::unordered_map<std::string, ModSym> module_syms;
  std::uint64_t extern_shared_align = 16;

  void decode_function(const ast::Function& af, Function& f);

  std::uint32_t src(const ast::Operand& o, Type t) override {
    if (o.kind == ast::Operand::kImm) {
      bool ok;
      std::uint64_t bits = literal_bits(o.text, o.negative, t, ok);
      if (!ok) fail(fmt::format("literal '{}' does not fit type .{}", o.text, type_name(t)));
      return constant(bits);
    }
    if (o.kind != ast::Operand::kName)
      fail(fmt::format("unexpected operand '{}'", operand_text(o)));
    if (o.negated) fail(fmt::format("negated operand '!{}' not allowed here", o.name));
    if (const LocalSym* s = find_local(o.name)) {
      if (s->is_reg) return s->slot;
      if (s->addr.base == kSlotZero) return constant(static_cast<std::uint64_t>(s->addr.offset));
      fail(fmt::format("address of '{}' used as an operand", o.name));
    }
    int sp = special_slot(o.name);
    if (sp >= 0) return static_cast<std::uint32_t>(sp);
    if (o.name == "WARP_SZ") return constant(32);
    auto it = module_syms.find(o.name);
    if (it != module_syms.end()) {
      note_shared(it->second.addr);
      if (it->second.addr.base == kSlotZero)
        return constant(static_cast<std::uint64_t>(it->second.addr.offset));
      fail(fmt::format("address of '{}' used as an operand", o.name));
    }
    if (dynamic_special(o)) fail(fmt::format("'{}' is only supported in mov", o.name));
    fail(fmt::format("unknown name '{}'", o.name));
  }

  std::uint32_t pred_src(const ast::Operand& o, Instr& in, int i) override {
    if (o.kind == ast::Operand::kName && o.negated) {
      ast::Operand plain = o;
      plain.negated = false;
      in.flags |= static_cast<std::uint16_t>(kFlagNegA << i);
      return src(plain, Type::pred);
    }
    return src(o, Type::pred);
  }

  std::uint32_t dst(const ast::Operand& o) override {
    if (o.kind == ast::Operand::kName && o.name == "_") return kSlotSink;
    if (o.kind == ast::Operand::kName && !o.negated)
      if (const LocalSym* s = find_local(o.name); s && s->is_reg) return s->slot;
    fail(fmt::format("destination '{}' is not a register", operand_text(o)));
  }

  Space mem(const ast::Operand& o, Instr& in) override {
    if (o.kind != ast::Operand::kMem)
      fail(fmt::format("expected [address], got '{}'", operand_text(o)));
    in.imm = o.offset;
    if (o.name.empty()) {
      in.addr = kSlotZero;
      return Space::generic;
    }
    if (const LocalSym* s = find_local(o.name); s && s->is_reg) {
      in.addr = s->slot;
      return Space::generic;
    }
    SymAddr a;
    ast::Operand n;
    n.name = o.name;
    if (!symbol(n, a)) fail(fmt::format("unknown address '{}'", o.name));
    in.addr = a.base;
    in.imm += a.offset;
    return a.space;
  }

  bool symbol(const ast::Operand& o, SymAddr& out) override {
    if (o.kind != ast::Operand::kName) return false;
    if (const LocalSym* s = find_local(o.name)) {
      if (s->is_reg) return false;
      out = s->addr;
      note_shared(out);
      return true;
    }
    auto it = module_syms.find(o.name);
    if (it == module_syms.end()) return false;
    out = it->second.addr;
    note_shared(out);
    return true;
  }

  int dynamic_special(const ast::Operand& o) override {
    if (o.kind != ast::Operand::kName) return 0;
    static const char* kDyn[] = {"%clock",       "%clock_hi",       "%clock64",
                                 "%globaltimer", "%globaltimer_lo", "%globaltimer_hi"};
    for (int i = 0; i < 6; ++i)
      if (o.name == kDyn[i]) return i + 1;
    return 0;
  }

  std::uint32_t label(const ast::Operand& o) override {
    auto it = labels_.find(o.name);
    if (o.kind != ast::Operand::kName || it == labels_.end())
      fail(fmt::format("unknown label '{}'", operand_text(o)));
    return it->second;
  }

  const Function* function(const std::string& name) override {
    auto it = prog_.by_name.find(name);
    if (it == prog_.by_name.end()) fail(fmt::format("call of unknown function '{}'", name));
    fn->callees.push_back(it->second);
    return it->second;
  }

  std::uint32_t add_call(CallSite site) override {
    fn->calls.push_back(std::move(site));
    return static_cast<std::uint32_t>(fn->calls.size() - 1);
  }

  std::uint32_t add_operand_slots(const std::vector<std::uint32_t>& slots) override {
    auto first = static_cast<std::uint32_t>(fn->operand_slots.size());
    fn->operand_slots.insert(fn->operand_slots.end(), slots.begin(), slots.end());
    return first;
  }

  std::uint64_t alloc_shared(std::uint64_t size, std::uint64_t align) {
    prog_.shared_bytes = align_up(prog_.shared_bytes, std::max<std::uint64_t>(align, 1));
    std::uint64_t off = prog_.shared_bytes;
    prog_.shared_bytes += size;
    return off;
  }

 private:
  Program& prog_;
  const DecoderTable& table_;
  std::vector<std::unordered_map<std::string, LocalSym>> scopes_;
  std::unordered_map<std::string, std::uint32_t> labels_;
  std::vector<std::uint64_t> consts_;
  std::unordered_map<std::uint64_t, std::uint32_t> const_index_;
  std::uint32_t next_slot_ = kNumFixedSlots;

  std::uint32_t constant(std::uint64_t bits) {
    auto [it, fresh] = const_index_.try_emplace(bits, static_cast<std::uint32_t>(consts_.size()));
    if (fresh) consts_.push_back(bits);
    return kConstTag | it->second;
  }
  const LocalSym* find_local(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return &f->second;
    }
    return nullptr;
  }
  void note_shared(const SymAddr& a) {
    if (a.space == Space::shared && a.base == kSlotZero)
      name_shared(static_cast<std::uint64_t>(a.offset), a.size);
  }
  void name_shared(std::uint64_t offset, std::uint64_t size) {
    const std::pair<std::uint64_t, std::uint64_t> var{offset, size};
    if (std::find(fn->own_shared.begin(), fn->own_shared.end(), var) == fn->own_shared.end())
      fn->own_shared.push_back(var);
  }
  static std::uint64_t var_size(const ast::VarDecl& v) {
    std::uint64_t n = v.count < 0 ? 1 : static_cast<std::uint64_t>(v.count);
    return n * static_cast<std::uint64_t>(type_bytes(parse_type(v.type))) * v.vec;
  }
  static std::uint64_t var_align(const ast::VarDecl& v) {
    if (v.align > 0) return static_cast<std::uint64_t>(v.align);
    return static_cast<std::uint64_t>(std::max(1, type_bytes(parse_type(v.type)) * v.vec));
  }
  void declare(const ast::VarDecl& v);
  void fix_slot(std::uint32_t& s, std::uint32_t base) const {
    if (s != kNoGuard && (s & kConstTag)) s = base + (s & ~kConstTag);
  }
};

void ModuleDecoder::declare(const ast::VarDecl& v) {
  auto& scope = scopes_.back();
  switch (v.space) {
    case ast::Space::reg: {
      if (v.range) {
        for (std::int64_t i = 0; i < v.count; ++i)
          scope[v.name + std::to_string(i)] = LocalSym{true, next_slot_++, {}};
      } else {
        scope[v.name] = LocalSym{true, next_slot_++, {}};
      }
      return;
    }
    case ast::Space::local: {
      std::uint64_t align = var_align(v);
      fn->local_align = std::max(fn->local_align, align);
      fn->local_bytes = align_up(fn->local_bytes, align);
      scope[v.name] = LocalSym{false, 0,
                               SymAddr{kSlotLocalBase, static_cast<std::int64_t>(fn->local_bytes),
                                       Space::local, var_size(v)}};
      fn->local_bytes += var_size(v);
      return;
    }
    case ast::Space::param: {
      std::uint64_t align = var_align(v);
      fn->param_frame_bytes = align_up(fn->param_frame_bytes, align);
      scope[v.name] =
          LocalSym{false, 0,
                   SymAddr{kSlotParamBase, static_cast<std::int64_t>(fn->param_frame_bytes),
                           Space::param, var_size(v)}};
      fn->param_frame_bytes += var_size(v);
      return;
    }
    case ast::Space::shared: {
      if (v.is_extern) {
        extern_shared_align = std::max(extern_shared_align, var_align(v));
        scope[v.name] = LocalSym{false, 0, SymAddr{kSlotDynSmemBase, 0, Space::shared, 0}};
        return;
      }
      std::uint64_t off = alloc_shared(var_size(v), var_align(v));
      scope[v.name] = LocalSym{
          false, 0, SymAddr{kSlotZero, static_cast<std::int64_t>(off), Space::shared, var_size(v)}};
      name_shared(off, var_size(v));
      return;
    }
    default:
      throw PtxError(
          fmt::format("unsupported PTX declaration at line {}: function-scope .{} "
                      "variable '{}'",
                      v.line, v.space == ast::Space::global ? "global" : "const", v.name));
  }
}

void ModuleDecoder::decode_function(const ast::Function& af, Function& f) {
  fn = &f;
  ai = nullptr;
  scopes_.clear();
  labels_.clear();
  consts_.clear();
  const_index_.clear();
  next_slot_ = kNumFixedSlots;
  f.params.clear();
  f.retvals.clear();
  f.param_bytes = f.param_frame_bytes = 0;
  scopes_.emplace_back();
  // Formal parameters: a kernel's live in the launch's parameter buffer (param-space address
  // = offset); a .func's in its frame of the thread's param stack: return values, then params.
  auto layout = [&](const std::vector<ast::VarDecl>& decls, std::vector<ParamSlot>& out,
                    std::uint64_t& cursor, std::uint32_t base) {
    for (const auto& v : decls) {
      ParamSlot p{0, var_size(v), var_align(v)};
      cursor = align_up(cursor, p.align);
      p.offset = cursor;
      cursor += p.size;
      out.push_back(p);
      scopes_.back()[v.name] = LocalSym{
          false, 0, SymAddr{base, static_cast<std::int64_t>(p.offset), Space::param, p.size}};
    }
  };
  if (f.is_entry) {
    layout(af.params, f.params, f.param_bytes, kSlotZero);
  } else {
    layout(af.retvals, f.retvals, f.param_frame_bytes, kSlotParamBase);
    layout(af.params, f.params, f.param_frame_bytes, kSlotParamBase);
  }
  if (!af.has_body) return;
  // Labels first: branches may go forward.
  std::uint32_t count = 0;
  for (const auto& s : af.body) {
    if (s.kind == ast::Statement::kInstruction)
      ++count;
    else if (s.kind == ast::Statement::kLabel)
      labels_[s.label] = count;
  }
  f.code.reserve(count + 1);
  for (const auto& s : af.body) {
    switch (s.kind) {
      case ast::Statement::kOpen:
        scopes_.emplace_back();
        break;
      case ast::Statement::kClose:
        if (scopes_.size() > 1) scopes_.pop_back();
        break;
      case ast::Statement::kDecl:
        declare(s.decl);
        break;
      case ast::Statement::kLabel:
        break;
      case ast::Statement::kInstruction: {
        ai = &s.instr;
        OpcodeParts info(ai->opcode);
        auto it = table_.find(info.base);
        if (it == table_.end())
          throw PtxError(
              fmt::format("unsupported PTX instruction '{}' at line {}", ai->opcode, ai->line));
        Instr in;
        in.line = static_cast<std::uint32_t>(ai->line);
        if (!ai->guard.empty()) {
          ast::Operand g;
          g.name = ai->guard;
          in.guard = src(g, Type::pred);
          in.guard_neg = ai->guard_neg;
        }
        it->second(*this, info, in);
        in.cost = issue_cost(info, in);
        for (std::size_t i = 0; i < info.mods.size(); ++i)
          if (!info.used[i] && !ignorable(info.mods[i]))
            throw PtxError(fmt::format(
                "unsupported PTX instruction '{}' at line {}: modifier '.{}' not implemented",
                ai->opcode, ai->line, info.mods[i]));
        std::string text = ai->opcode;
        for (std::size_t i = 0; i < ai->operands.size(); ++i)
          text += (i ? ", " : " ") + operand_text(ai->operands[i]);
        f.code.push_back(in);
        f.text.push_back(std::move(text));
        break;
      }
    }
  }
  // A final ret, so running off the end of a body cannot leave the code array.
  {
    ast::Instruction ret;
    ret.opcode = "ret";
    ret.line = af.line;
    ai = &ret;
    OpcodeParts info("ret");
    Instr in;
    in.line = static_cast<std::uint32_t>(af.line);
    table_.at("ret")(*this, info, in);
    in.cost = issue_cost(info, in);
    f.code.push_back(in);
    f.text.push_back("ret (end of function)");
    ai = nullptr;
  }
  // Constants go after the registers.
  std::uint32_t base = next_slot_;
  for (auto& in : f.code) {
    fix_slot(in.guard, base);
    for (auto& d : in.d) fix_slot(d, base);
    for (auto& s : in.s) fix_slot(s, base);
    fix_slot(in.addr, base);
  }
  for (auto& s : f.operand_slots) fix_slot(s, base);
  for (auto& c : f.calls) {
    for (auto& s : c.arg_slots) fix_slot(s, base);
    fix_slot(c.ret_slot, base);
  }
  f.consts = consts_;
  f.num_slots = base + static_cast<std::uint32_t>(consts_.size());
}

// Bytes of one initializer element of `type`.
void write_init(std::uint8_t* dst, std::uint64_t capacity, const ast::VarDecl& v,
                const std::unordered_map<std::string, ModSym>& syms) {
  Type t = parse_type(v.type);
  int eb = type_bytes(t);
  std::uint64_t off = 0;
  for (const auto& lit : v.init) {
    if (off + static_cast<std::uint64_t>(eb) > capacity) break;
    std::uint64_t bits;
    if (!lit.empty() && lit[0] == '&') {
      auto it = syms.find(lit.substr(1));
      if (it == syms.end() || it->second.addr.space != Space::global)
        throw PtxError(fmt::format("unsupported PTX initializer at line {}: address of '{}'",
                                   v.line, lit.substr(1)));
      bits = static_cast<std::uint64_t>(it->second.addr.offset);
    } else if (!lit.empty() && (std::isalpha(static_cast<unsigned char>(lit[0])) || lit[0] == '_' ||
                                lit[0] == '$')) {
      auto it = syms.find(lit);
      if (it == syms.end() || it->second.addr.space != Space::global)
        throw PtxError(fmt::format("unsupported PTX initializer at line {}: '{}'", v.line, lit));
      bits = static_cast<std::uint64_t>(it->second.addr.offset);
    } else {
      bool neg = lit[0] == '-';
      bool ok;
      bits = literal_bits(neg ? lit.substr(1) : lit, neg, t, ok);
      if (!ok) throw PtxError(fmt::format("bad initializer '{}' at line {}", lit, v.line));
    }
    std::memcpy(dst + off, &bits, static_cast<std::size_t>(eb));
    off += static_cast<std::uint64_t>(eb);
  }
}

}  // namespace

Program decode_module(
    const ast::Module& m,
    const std::function<std::uint64_t(std::uint64_t, const std::string&)>& alloc_global) {
  static const DecoderTable table = [] {
    DecoderTable t;
    add_int_decoders(t);
    add_bits_decoders(t);
    add_compare_decoders(t);
    add_float_decoders(t);
    add_convert_decoders(t);
    add_memory_decoders(t);
    add_control_decoders(t);
    add_warp_decoders(t);
    add_mma_decoders(t);
    return t;
  }();
  Program prog;
  ModuleDecoder dec(prog, table);
  auto var_size = [](const ast::VarDecl& v) {
    std::uint64_t n = v.count < 0 ? 1 : static_cast<std::uint64_t>(v.count);
    if (v.count == 0 && v.has_init) n = v.init.size();
    return n * static_cast<std::uint64_t>(type_bytes(parse_type(v.type))) * v.vec;
  };
  auto var_align = [](const ast::VarDecl& v) -> std::uint64_t {
    if (v.align > 0) return static_cast<std::uint64_t>(v.align);
    return static_cast<std::uint64_t>(std::max(1, type_bytes(parse_type(v.type)) * v.vec));
  };
  for (const auto& v : m.globals) {
    if (parse_type(v.type) == Type::none)
      throw PtxError(fmt::format("unsupported PTX variable type '.{}' at line {}", v.type, v.line));
    std::uint64_t size = var_size(v);
    SymAddr a;
    a.size = size;
    switch (v.space) {
      case ast::Space::global: {
        if (v.is_extern)
          throw PtxError(fmt::format("unsupported PTX at line {}: extern .global '{}' (no linker)",
                                     v.line, v.name));
        std::uint64_t addr = alloc_global(size, v.name);
        std::memset(reinterpret_cast<void*>(addr), 0, size);
        a.space = Space::global;
        a.offset = static_cast<std::int64_t>(addr);
        dec.module_syms[v.name] = ModSym{a};
        write_init(reinterpret_cast<std::uint8_t*>(addr), size, v, dec.module_syms);
        prog.globals.push_back({v.name, addr, size});
        break;
      }
      case ast::Space::const_: {
        std::uint64_t off = align_up(prog.const_bank.size(), var_align(v));
        prog.const_bank.resize(off + size);
        a.space = Space::const_;
        a.offset = static_cast<std::int64_t>(off);
        dec.module_syms[v.name] = ModSym{a};
        write_init(prog.const_bank.data() + off, size, v, dec.module_syms);
        break;
      }
      case ast::Space::shared: {
        a.space = Space::shared;
        if (v.is_extern || v.count == 0) {
          dec.extern_shared_align = std::max(dec.extern_shared_align, var_align(v));
          a.base = kSlotDynSmemBase;
          a.size = 0;
        } else {
          a.offset = static_cast<std::int64_t>(dec.alloc_shared(size, var_align(v)));
        }
        dec.module_syms[v.name] = ModSym{a};
        break;
      }
      default:
        throw PtxError(
            fmt::format("unsupported PTX at line {}: module-scope variable '{}' in "
                        "this state space",
                        v.line, v.name));
    }
  }
  for (const auto& af : m.functions) {
    if (prog.by_name.count(af.name)) {
      // A declaration followed by the definition: keep one Function, decoded from the body.
      continue;
    }
    auto f = std::make_unique<Function>();
    f->name = af.name;
    f->is_entry = af.is_entry;
    f->line = af.line;
    std::copy(af.maxntid, af.maxntid + 3, f->maxntid);
    std::copy(af.reqntid, af.reqntid + 3, f->reqntid);
    prog.by_name[af.name] = f.get();
    prog.functions.push_back(std::move(f));
  }
  // Definitions win over declarations; a name never defined is an extern (builtin) function.
  for (auto& f : prog.functions) f->is_extern = true;
  for (const auto& af : m.functions)
    if (af.has_body) prog.by_name[af.name]->is_extern = false;
  for (const auto& af : m.functions) {
    Function& f = *prog.by_name[af.name];
    if (af.has_body || f.is_extern) dec.decode_function(af, f);
  }
  // Static shared a kernel can reach: its own and its callees' variables. Two kernels of one
  // module each reach only theirs, so neither is charged for the other's.
  for (auto& f : prog.functions) {
    if (!f->is_entry) continue;
    std::vector<const Function*> stack{f.get()};
    std::vector<const Function*> seen;
    std::set<std::pair<std::uint64_t, std::uint64_t>> vars;
    while (!stack.empty()) {
      const Function* g = stack.back();
      stack.pop_back();
      if (std::find(seen.begin(), seen.end(), g) != seen.end()) continue;
      seen.push_back(g);
      vars.insert(g->own_shared.begin(), g->own_shared.end());
      for (const Function* c : g->callees) stack.push_back(c);
    }
    for (const auto& [offset, size] : vars) {
      f->static_shared_bytes += size;
      f->static_shared_extent = std::max(f->static_shared_extent, offset + size);
    }
  }
  prog.extern_shared_align = dec.extern_shared_align;
  return prog;
}

}  // namespace kiln::cuda::vgpu
