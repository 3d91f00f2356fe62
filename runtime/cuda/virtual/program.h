// The decoded, executable form of a PTX module. Each function is decoded once per module load:
// registers become slots in a flat 64-bit register file (immediates and special registers are
// slots too), branch targets are instruction indices and every instruction carries a handler
// picked for its exact opcode and types, so execution does no string work.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::cuda::vgpu {

struct ThreadState;
struct Instr;
using Handler = void (*)(ThreadState&, const Instr&);

// Operand and element types of PTX.
enum class Type : std::uint8_t {
  none,
  b8,
  b16,
  b32,
  b64,
  b128,
  u8,
  u16,
  u32,
  u64,
  s8,
  s16,
  s32,
  s64,
  f16,
  f16x2,
  bf16,
  bf16x2,
  f32,
  f64,
  pred,
  tf32
};

inline bool is_float(Type t) {
  return t == Type::f16 || t == Type::f16x2 || t == Type::bf16 || t == Type::bf16x2 ||
         t == Type::f32 || t == Type::f64;
}
inline bool is_signed(Type t) {
  return t == Type::s8 || t == Type::s16 || t == Type::s32 || t == Type::s64;
}
int type_bytes(Type t);
const char* type_name(Type t);

// Generic addresses: global is the host address itself (user space is below 2^47); the other
// state spaces get windows above it, as hardware maps shared and local into the generic space.
inline constexpr std::uint64_t kSharedWindow = 0x0000'a000'0000'0000ull;
inline constexpr std::uint64_t kLocalWindow = 0x0000'b000'0000'0000ull;
inline constexpr std::uint64_t kParamWindow = 0x0000'c000'0000'0000ull;
inline constexpr std::uint64_t kConstWindow = 0x0000'd000'0000'0000ull;
inline constexpr std::uint64_t kWindowSize = 0x0000'0100'0000'0000ull;
// Param-space addresses below this are the kernel's parameters; above, the thread's call stack.
inline constexpr std::uint64_t kParamStackBase = 1ull << 24;

enum class Space : std::uint8_t { generic, global, shared, local, param, const_ };
const char* space_name(Space s);

// Fixed register-file slots at the start of every frame, filled when the frame is entered.
enum Slot : std::uint32_t {
  kSlotZero,
  kSlotTidX,
  kSlotTidY,
  kSlotTidZ,
  kSlotNtidX,
  kSlotNtidY,
  kSlotNtidZ,
  kSlotCtaidX,
  kSlotCtaidY,
  kSlotCtaidZ,
  kSlotNctaidX,
  kSlotNctaidY,
  kSlotNctaidZ,
  kSlotLaneId,
  kSlotWarpId,
  kSlotNWarpId,
  kSlotSmId,
  kSlotNSmId,
  kSlotGridId,
  kSlotLanemaskEq,
  kSlotLanemaskLe,
  kSlotLanemaskLt,
  kSlotLanemaskGe,
  kSlotLanemaskGt,
  kSlotDynSmem,
  kSlotTotalSmem,
  kSlotLocalBase,    // this frame's base in the thread's local stack
  kSlotParamBase,    // this frame's base in the thread's param stack
  kSlotDynSmemBase,  // shared-space offset of extern .shared (after the kernel's static shared)
  kSlotSink,         // writes to '_' land here
  kNumFixedSlots
};
inline constexpr std::uint32_t kNoGuard = 0xffffffffu;

enum InstrFlag : std::uint16_t {
  kFlagMayStop = 1,  // may end the thread's run (branch, call, collective, exit)
  kFlagFtz = 2,
  kFlagSat = 4,
  kFlagNegA = 8,  // source predicates written as !p
  kFlagNegB = 16,
  kFlagNegC = 32,
  kFlagApprox = 64,
  kFlagHasPair = 128,     // second destination (setp's q, shfl's predicate)
  kFlagRelu = 256,        // fma.relu / min.relu / max.relu on 16-bit floats
  kFlagSyncAccess = 512,  // ld/st .volatile/.relaxed/.acquire/.release: a flag, not a race
};

struct Function;

struct Instr {
  Handler fn = nullptr;
  std::uint32_t guard = kNoGuard;
  bool guard_neg = false;
  Type type = Type::none;
  Type type2 = Type::none;  // cvt source type, etc.
  std::uint8_t mod = 0;     // rounding mode, comparison, shuffle mode, atomic op...
  std::uint8_t mod2 = 0;    // setp's boolean combiner, ...
  std::uint8_t vec = 1;     // vector width
  Space space = Space::generic;
  std::uint16_t flags = 0;
  // Its issue cost on the modeled GPU in quarter slots (issue_cost.h), summed per executed
  // instruction next to the raw count.
  std::uint16_t cost = 0;
  std::uint32_t d[4] = {kSlotSink, kSlotSink, kSlotSink, kSlotSink};
  std::uint32_t s[4] = {kSlotZero, kSlotZero, kSlotZero, kSlotZero};
  std::uint32_t addr = kSlotZero;  // memory operand base slot
  std::int64_t imm = 0;            // memory offset; branch target
  const Function* callee = nullptr;
  std::uint32_t aux = 0;  // index into Function::calls
  std::uint32_t line = 0;
};

struct CallSite {
  std::vector<std::uint32_t> arg_slots;  // caller param-space: slot + offset per argument
  std::vector<std::int64_t> arg_offsets;
  std::uint32_t ret_slot = kSlotZero;
  std::int64_t ret_offset = 0;
  bool has_ret = false;
};

struct ParamSlot {
  std::uint64_t offset = 0;  // within the frame's param area
  std::uint64_t size = 0;
  std::uint64_t align = 1;
};

struct Function {
  std::string name;
  bool is_entry = false;
  bool is_extern = false;  // declared only: a builtin (vprintf, __assertfail, malloc, free)
  std::vector<Instr> code;
  std::vector<std::string> text;  // source of each instruction, for messages
  std::uint32_t num_slots = kNumFixedSlots;
  std::vector<std::uint64_t> consts;    // slot (num_slots - consts.size() + i) holds consts[i]
  std::vector<std::uint8_t> slot_bits;  // declared width per slot (for messages)
  std::vector<ParamSlot> params;        // formal parameters (kernel: in the kernel param buffer)
  std::vector<ParamSlot> retvals;
  std::uint64_t param_bytes = 0;        // kernel params total; .func: formals + retvals + locals
  std::uint64_t param_frame_bytes = 0;  // .func: frame size in the param stack
  std::uint64_t local_bytes = 0;        // .local depot size
  std::uint64_t local_align = 16;
  // The static .shared this kernel can reach: their bytes (what a GPU charges the kernel, which
  // lays out only its own), and the end of their offsets in the module's one layout (what a
  // block's shared memory backs; dynamic shared memory starts after it).
  std::uint64_t static_shared_bytes = 0;
  std::uint64_t static_shared_extent = 0;
  // The .shared this function names itself, as (offset, size) in the module's layout.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> own_shared;
  std::vector<const Function*> callees;
  unsigned maxntid[3] = {0, 0, 0};
  unsigned reqntid[3] = {0, 0, 0};
  std::vector<CallSite> calls;
  // Source slots of instructions with more operands than Instr holds (mma's A, B and C
  // fragments), each run starting at its Instr::imm.
  std::vector<std::uint32_t> operand_slots;
  int line = 0;
};

struct Program {
  std::vector<std::unique_ptr<Function>> functions;
  std::unordered_map<std::string, Function*> by_name;
  std::uint64_t shared_bytes = 0;  // all static .shared of the module, laid out together
  std::uint64_t extern_shared_align =
      16;  // extern .shared starts at the kernel's static end, aligned so
  std::vector<std::uint8_t> const_bank;  // .const data
  // Module-scope .global data, allocated (and registered with the memory checker) at load.
  struct GlobalVar {
    std::string name;
    std::uint64_t address = 0;
    std::uint64_t size = 0;
  };
  std::vector<GlobalVar> globals;
};

}  // namespace kiln::cuda::vgpu
