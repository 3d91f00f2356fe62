// PTX types, opcode splitting and literals: the vocabulary the decoders share.
#include <fmt/format.h>

#include <bit>
#include <string>

#include "runtime/cuda/virtual/decoder.h"
#include "runtime/cuda/virtual/float_format.h"

namespace kiln::cuda::vgpu {

namespace {

struct TypeName {
  const char* name;
  Type type;
  int bytes;
};
constexpr TypeName kTypes[] = {
    {"b8", Type::kB8, 1},     {"b16", Type::kB16, 2},       {"b32", Type::kB32, 4},
    {"b64", Type::kB64, 8},   {"b128", Type::kB128, 16},    {"u8", Type::kU8, 1},
    {"u16", Type::kU16, 2},   {"u32", Type::kU32, 4},       {"u64", Type::kU64, 8},
    {"s8", Type::kS8, 1},     {"s16", Type::kS16, 2},       {"s32", Type::kS32, 4},
    {"s64", Type::kS64, 8},   {"f16", Type::kF16, 2},       {"f16x2", Type::kF16x2, 4},
    {"bf16", Type::kBF16, 2}, {"bf16x2", Type::kBF16x2, 4}, {"f32", Type::kF32, 4},
    {"f64", Type::kF64, 8},   {"pred", Type::kPred, 1},     {"tf32", Type::kTF32, 4},
};

}  // namespace

// Literal `text` (with sign) as the bits of type `t`.
std::uint64_t literal_bits(const std::string& text_in, bool negative, Type t, bool& ok) {
  ok = true;
  std::string text = text_in;
  while (!text.empty() && (text.back() == 'U' || text.back() == 'u')) text.pop_back();
  bool is_hex_float = text.size() > 2 && text[0] == '0' &&
                      (text[1] == 'f' || text[1] == 'F' || text[1] == 'd' || text[1] == 'D');
  long double value = 0;
  bool is_float_literal = false;
  if (is_hex_float) {
    std::uint64_t bits = std::stoull(text.substr(2), nullptr, 16);
    if (text[1] == 'f' || text[1] == 'F')
      value = std::bit_cast<float>(std::uint32_t(bits));
    else
      value = std::bit_cast<double>(bits);
    if ((text[1] == 'f' || text[1] == 'F') && (t == Type::kF32 || !is_float(t)) && !negative)
      return bits;
    if ((text[1] == 'd' || text[1] == 'D') && (t == Type::kF64 || !is_float(t)) && !negative)
      return bits;
    is_float_literal = true;
  } else if (text.find_first_of(".eE") != std::string::npos &&
             !(text.size() > 1 && (text[1] == 'x' || text[1] == 'X'))) {
    value = std::stold(text);
    is_float_literal = true;
  }
  if (negative) value = -value;
  if (is_float_literal || is_float(t)) {
    if (!is_float_literal) {
      std::uint64_t u = std::stoull(text, nullptr, 0);
      value = negative ? -static_cast<long double>(u) : static_cast<long double>(u);
    }
    switch (t) {
      case Type::kF16:
        return encode_float(FloatFormat::kF16, value, Round::kRn);
      case Type::kBF16:
        return encode_float(FloatFormat::kBF16, value, Round::kRn);
      case Type::kF64:
        return encode_float(FloatFormat::kF64, value, Round::kRn);
      case Type::kF32:
        return encode_float(FloatFormat::kF32, value, Round::kRn);
      default:
        ok = false;
        return 0;
    }
  }
  std::uint64_t u;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'b' || text[1] == 'B'))
    u = std::stoull(text.substr(2), nullptr, 2);
  else
    u = std::stoull(text, nullptr, 0);
  return negative ? ~u + 1 : u;
}

Type parse_type(std::string_view name) {
  for (const auto& t : kTypes)
    if (name == t.name) return t.type;
  return Type::kNone;
}

int type_bytes(Type t) {
  for (const auto& k : kTypes)
    if (k.type == t) return k.bytes;
  return 0;
}

const char* type_name(Type t) {
  for (const auto& k : kTypes)
    if (k.type == t) return k.name;
  return "?";
}

const char* space_name(Space s) {
  switch (s) {
    case Space::kGeneric:
      return "generic";
    case Space::kGlobal:
      return "global";
    case Space::kShared:
      return "shared";
    case Space::kLocal:
      return "local";
    case Space::kParam:
      return "param";
    case Space::kConst:
      return "const";
  }
  return "?";
}

OpInfo::OpInfo(const std::string& opcode) : text(opcode) {
  std::size_t p = opcode.find('.');
  base = opcode.substr(0, p);
  while (p != std::string::npos) {
    std::size_t q = opcode.find('.', p + 1);
    std::string part = opcode.substr(p + 1, q == std::string::npos ? q : q - p - 1);
    Type t = parse_type(part);
    if (t != Type::kNone)
      types.push_back(t);
    else
      mods.push_back(part);
    p = q;
  }
  used.assign(mods.size(), false);
}

bool OpInfo::take(std::string_view m) {
  for (std::size_t i = 0; i < mods.size(); ++i)
    if (mods[i] == m) {
      used[i] = true;
      return true;
    }
  return false;
}

bool OpInfo::has(std::string_view m) const {
  for (const auto& x : mods)
    if (x == m) return true;
  return false;
}

int OpInfo::take_one(std::initializer_list<std::string_view> options) {
  int i = 0;
  for (auto o : options) {
    if (take(o)) return i;
    ++i;
  }
  return -1;
}

std::uint8_t take_rounding(OpInfo& info) {
  static const std::pair<const char*, Round> kModes[] = {
      {"rn", Round::kRn},  {"rz", Round::kRz},  {"rm", Round::kRm},
      {"rp", Round::kRp},  {"rni", Round::kRn}, {"rzi", Round::kRz},
      {"rmi", Round::kRm}, {"rpi", Round::kRp}, {"rna", Round::kRna}};
  for (auto& [name, mode] : kModes)
    if (info.take(name)) return static_cast<std::uint8_t>(mode);
  return static_cast<std::uint8_t>(Round::kNone);
}

}  // namespace kiln::cuda::vgpu
