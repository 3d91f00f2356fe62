// The parsed form of a PTX module: a faithful syntax tree, before any name resolution.
// ptx_parser builds it; decoder turns it into the executable Program.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::cuda::vgpu::ast {

struct Operand {
  enum Kind : std::uint8_t {
    kName,  // register, symbol, label or special register
    kImm,   // literal: text is the token, `negative` its sign
    kMem,   // [name+offset] / [offset]
    kVec,   // {a, b, ...}
    kList,  // (a, b, ...) in call
    kPair,  // a|b
  };
  Kind kind = kName;
  std::string name;            // kName; kMem base (empty for an absolute address)
  std::string text;            // kImm literal
  bool negative = false;       // kImm written with a leading '-'
  bool negated = false;        // kName written as !%p
  std::int64_t offset = 0;     // kMem
  std::vector<Operand> elems;  // kVec, kList, kPair
};

struct Instruction {
  int line = 0;
  std::string guard;  // predicate name, empty if unguarded
  bool guard_neg = false;
  std::string opcode;  // e.g. "ld.global.nc.v4.f32"
  std::vector<Operand> operands;
};

enum class Space : std::uint8_t { reg, global, shared, local, param, const_ };

struct VarDecl {
  int line = 0;
  Space space = Space::reg;
  std::string type;  // "b32", "f32", "pred", ...
  int vec = 1;       // .v2 / .v4 variables
  int align = 0;     // 0: natural
  std::string name;
  std::int64_t count = -1;  // array element count; -1 scalar; 0 for [] (unsized)
  bool range = false;       // %r<count> declares %r0 .. %r(count-1)
  bool is_extern = false;
  std::vector<std::string> init;  // initializer literals in order (signs folded in)
  bool has_init = false;
};

struct Statement {
  enum Kind : std::uint8_t { kInstruction, kLabel, kDecl, kOpen, kClose };
  Kind kind = kInstruction;
  Instruction instr;  // kInstruction
  std::string label;  // kLabel
  VarDecl decl;       // kDecl
  int line = 0;
};

struct Function {
  int line = 0;
  std::string name;
  bool is_entry = false;
  bool has_body = false;
  std::vector<VarDecl> params;
  std::vector<VarDecl> retvals;
  unsigned maxntid[3] = {0, 0, 0};
  unsigned reqntid[3] = {0, 0, 0};
  std::vector<Statement> body;
};

struct Module {
  std::string version, target;
  int address_size = 64;
  std::vector<VarDecl> globals;  // module-scope .global/.const/.shared variables
  std::vector<Function> functions;
};

// Parses PTX text; throws PtxError naming the line on malformed input.
Module parse_ptx(const std::string& text);

}  // namespace kiln::cuda::vgpu::ast
