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
    {"b8", Type::b8, 1},     {"b16", Type::b16, 2},       {"b32", Type::b32, 4},
    {"b64", Type::b64, 8},   {"b128", Type::b128, 16},    {"u8", Type::u8, 1},
    {"u16", Type::u16, 2},   {"u32", Type::u32, 4},       {"u64", Type::u64, 8},
    {"s8", Type::s8, 1},     {"s16", Type::s16, 2},       {"s32", Type::s32, 4},
    {"s64", Type::s64, 8},   {"f16", Type::f16, 2},       {"f16x2", Type::f16x2, 4},
    {"bf16", Type::bf16, 2}, {"bf16x2", Type::bf16x2, 4}, {"f32", Type::f32, 4},
    {"f64", Type::f64, 8},   {"pred", Type::pred, 1},     {"tf32", Type::tf32, 4},
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
    if ((text[1] == 'f' || text[1] == 'F') && (t == Type::f32 || !is_float(t)) && !negative)
      return bits;
    if ((text[1] == 'd' || text[1] == 'D') && (t == Type::f64 || !is_float(t)) && !negative)
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
      case Type::f16:
        return encode_float(FloatFormat::f16, value, Round::rn);
      case Type::bf16:
        return encode_float(FloatFormat::bf16, value, Round::rn);
      case Type::f64:
        return encode_float(FloatFormat::f64, value, Round::rn);
      case Type::f32:
        return encode_float(FloatFormat::f32, value, Round::rn);
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
  return Type::none;
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
    case Space::generic:
      return "generic";
    case Space::global:
      return "global";
    case Space::shared:
      return "shared";
    case Space::local:
      return "local";
    case Space::param:
      return "param";
    case Space::const_:
      return "const";
  }
  return "?";
}

OpcodeParts::OpcodeParts(const std::string& opcode) : text(opcode) {
  std::size_t p = opcode.find('.');
  base = opcode.substr(0, p);
  while (p != std::string::npos) {
    std::size_t q = opcode.find('.', p + 1);
    std::string part = opcode.substr(p + 1, q == std::string::npos ? q : q - p - 1);
    Type t = parse_type(part);
    if (t != Type::none)
      types.push_back(t);
    else
      mods.push_back(part);
    p = q;
  }
  used.assign(mods.size(), false);
}

bool OpcodeParts::take(std::string_view m) {
  for (std::size_t i = 0; i < mods.size(); ++i)
    if (mods[i] == m) {
      used[i] = true;
      return true;
    }
  return false;
}

bool OpcodeParts::has(std::string_view m) const {
  for (const auto& x : mods)
    if (x == m) return true;
  return false;
}

int OpcodeParts::take_one(std::initializer_list<std::string_view> options) {
  int i = 0;
  for (auto o : options) {
    if (take(o)) return i;
    ++i;
  }
  return -1;
}

std::uint8_t take_rounding(OpcodeParts& info) {
  static const std::pair<const char*, Round> kModes[] = {
      {"rn", Round::rn},  {"rz", Round::rz},  {"rm", Round::rm},
      {"rp", Round::rp},  {"rni", Round::rn}, {"rzi", Round::rz},
      {"rmi", Round::rm}, {"rpi", Round::rp}, {"rna", Round::rna}};
  for (auto& [name, mode] : kModes)
    if (info.take(name)) return static_cast<std::uint8_t>(mode);
  return static_cast<std::uint8_t>(Round::none);
}

}  // namespace kiln::cuda::vgpu
