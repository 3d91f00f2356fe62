// Decoding PTX instructions into Instr: the per-function context that resolves names to
// register slots, constants and addresses, and the table of per-opcode decoders that the
// instruction families (ops_*.cpp) fill in.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/cuda/virtual/program.h"
#include "runtime/cuda/virtual/ptx_ast.h"

namespace kiln::cuda::vgpu {

Type parse_type(std::string_view name);  // "f32" -> Type::f32, unknown -> Type::none

// An opcode split at its dots: "setp.lt.and.f32" -> base "setp", mods {lt, and}, types {f32}.
struct OpcodeParts {
  std::string text;
  std::string base;
  std::vector<std::string> mods;
  std::vector<bool> used;
  std::vector<Type> types;

  explicit OpcodeParts(const std::string& opcode);
  bool take(std::string_view m);  // marks `m` used; false when absent
  bool has(std::string_view m) const;
  Type type(std::size_t i = 0) const { return i < types.size() ? types[i] : Type::none; }
  // The first modifier among `options` present (marked used), or -1.
  int take_one(std::initializer_list<std::string_view> options);
};

// A symbol's address: value of register `base` plus `offset`, in state space `space`.
struct SymAddr {
  std::uint32_t base = kSlotZero;
  std::int64_t offset = 0;
  Space space = Space::global;
  std::uint64_t size = 0;
};

class DecodeCtx {
 public:
  virtual ~DecodeCtx() = default;
  const ast::Instruction* ai = nullptr;
  Function* fn = nullptr;

  // Register, immediate (typed by `t`), or special register as a slot.
  virtual std::uint32_t src(const ast::Operand& o, Type t) = 0;
  // Source predicate; sets in.flags' negation bit for operand index `i` when written `!p`.
  virtual std::uint32_t pred_src(const ast::Operand& o, Instr& in, int i) = 0;
  virtual std::uint32_t dst(const ast::Operand& o) = 0;
  // Memory operand [base+off] into in.addr / in.imm; returns the space of a named symbol, or
  // Space::generic when the base is a register.
  virtual Space mem(const ast::Operand& o, Instr& in) = 0;
  // Address of a variable named in `o` (mov %rd, sym); false if `o` is not a variable.
  virtual bool symbol(const ast::Operand& o, SymAddr& out) = 0;
  // Dynamic special register (%clock, %clock64, %globaltimer...): 0 if `o` is none.
  virtual int dynamic_special(const ast::Operand& o) = 0;
  virtual std::uint32_t label(const ast::Operand& o) = 0;
  virtual const Function* function(const std::string& name) = 0;
  virtual std::uint32_t add_call(CallSite site) = 0;
  // Appends slots to Function::operand_slots (operands past Instr's d[4] / s[4]); returns the
  // index of the first.
  virtual std::uint32_t add_operand_slots(const std::vector<std::uint32_t>& slots) = 0;
  // Throws PtxError "unsupported PTX instruction '<opcode>' at line N: <why>".
  [[noreturn]] void fail(const std::string& why) const;

  const ast::Operand& op(std::size_t i) {
    if (i >= ai->operands.size()) fail("missing operand");
    return ai->operands[i];
  }
  std::size_t nops() const { return ai->operands.size(); }
};

using OpDecoder = std::function<void(DecodeCtx&, OpcodeParts&, Instr&)>;
using DecoderTable = std::unordered_map<std::string, OpDecoder>;

// Each family adds its opcodes.
void add_int_decoders(DecoderTable& table);
void add_bits_decoders(DecoderTable& table);
void add_compare_decoders(DecoderTable& table);
void add_float_decoders(DecoderTable& table);
void add_convert_decoders(DecoderTable& table);
void add_memory_decoders(DecoderTable& table);
void add_control_decoders(DecoderTable& table);
void add_warp_decoders(DecoderTable& table);
void add_mma_decoders(DecoderTable& table);

// Literal `text` (sign given apart) as the bits of type `t`; ok = false if it cannot be one.
std::uint64_t literal_bits(const std::string& text, bool negative, Type t, bool& ok);

// Rounding-mode modifier (rn rz rm rp rni rzi rmi rpi rna) -> Round; Round::none when absent.
std::uint8_t take_rounding(OpcodeParts& info);

// Builds the Program for a parsed module. `alloc_global` allocates checked device memory for
// module-scope .global data.
Program decode_module(
    const ast::Module& m,
    const std::function<std::uint64_t(std::uint64_t size, const std::string& name)>& alloc_global);

}  // namespace kiln::cuda::vgpu
