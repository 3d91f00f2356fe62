// CUDA spellings of the elementwise primitives and of dtypes (see cuda_expr.h).
#include "jit/codegen/cuda_expr.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/device_checks.h"
#include "runtime/random.h"

namespace kiln::jit::codegen {
namespace {

bool is_comparison(OpId op) {
  return op == OpId::eq || op == OpId::ne || op == OpId::lt || op == OpId::le || op == OpId::gt ||
         op == OpId::ge;
}

// Fills `{f}` (the libm suffix: "f" for float), `{a}`, `{b}`, `{c}` (the arguments) and `{T}`
// (a C-style cast to the register type: "(long long)" has no functional-cast form).
std::string spell(std::string_view pattern, DType t, std::span<const std::string> args) {
  std::string f = t == DType::f64 ? "" : "f";
  std::string a0 = args.size() > 0 ? args[0] : "", a1 = args.size() > 1 ? args[1] : "",
              a2 = args.size() > 2 ? args[2] : "";
  return fmt::format(fmt::runtime(pattern), fmt::arg("f", f), fmt::arg("a", a0), fmt::arg("b", a1),
                     fmt::arg("c", a2), fmt::arg("T", "(" + register_type(t) + ")"));
}

}  // namespace

std::string storage_type(DType t) {
  switch (t) {
    case DType::bool_:
      return "bool";
    case DType::i8:
      return "signed char";
    case DType::i32:
      return "int";
    case DType::i64:
      return "long long";
    case DType::f16:
      return "__half";
    case DType::bf16:
      return "__nv_bfloat16";
    case DType::f32:
      return "float";
    case DType::f64:
      return "double";
  }
  return "?";
}

std::string register_type(DType t) {
  return storage_type(compute_dtype(t));
}

std::string load_expr(DType t, const std::string& stored) {
  if (t == DType::f16) return fmt::format("__half2float({})", stored);
  if (t == DType::bf16) return fmt::format("__bfloat162float({})", stored);
  return stored;
}

std::string store_expr(DType t, const std::string& value) {
  if (t == DType::f16) return fmt::format("__float2half_rn({})", value);
  if (t == DType::bf16) return fmt::format("__float2bfloat16_rn({})", value);
  return value;
}

std::string convert_expr(DType from, DType to, const std::string& value) {
  // f16 and bf16 live in float registers: converting to them still rounds.
  if ((to == DType::f16 || to == DType::bf16) && from != to) {
    std::string wide = convert_expr(from, DType::f32, value);
    return to == DType::f16 ? fmt::format("__half2float(__float2half_rn({}))", wide)
                            : fmt::format("__bfloat162float(__float2bfloat16_rn({}))", wide);
  }
  if (register_type(from) == register_type(to)) return value;
  if (to == DType::bool_) return fmt::format("({} != 0)", value);
  // A float reaches i8 through i64 and wraps, as the CPU converts it (a direct cvt saturates).
  if (to == DType::i8 && is_floating(from))
    return fmt::format("static_cast<signed char>(static_cast<long long>({}))", value);
  return fmt::format("static_cast<{}>({})", register_type(to), value);
}

std::string infinity(DType t, bool negative) {
  std::string sign = negative ? "-" : "";
  switch (t) {
    case DType::f64:
      return sign + "__longlong_as_double(0x7ff0000000000000ll)";
    case DType::i8:
      return negative ? "(-128)" : "127";
    case DType::i32:
      return negative ? "(-2147483647 - 1)" : "2147483647";
    case DType::i64:
      return negative ? "(-0x7fffffffffffffffll - 1)" : "0x7fffffffffffffffll";
    default:
      return sign + "__int_as_float(0x7f800000)";
  }
}

std::string literal(DType t, double value) {
  switch (compute_dtype(t)) {
    case DType::bool_:
      return value != 0 ? "true" : "false";
    case DType::i8:
      return fmt::format("static_cast<signed char>({})",
                         static_cast<int>(static_cast<std::int8_t>(value)));
    case DType::i32:
      return fmt::format("{}", static_cast<std::int32_t>(value));
    case DType::i64:
      return fmt::format("{}ll", static_cast<std::int64_t>(value));
    case DType::f32: {
      auto bits = std::bit_cast<std::uint32_t>(static_cast<float>(value));
      if (!std::isfinite(value)) return fmt::format("__int_as_float(0x{:08x})", bits);
      return fmt::format("{:a}f", static_cast<float>(value));
    }
    default: {
      auto bits = std::bit_cast<std::uint64_t>(value);
      if (!std::isfinite(value)) return fmt::format("__longlong_as_double(0x{:016x}ll)", bits);
      return fmt::format("{:a}", value);
    }
  }
}

DType compute_dtype_of(OpId op, std::span<const DType> inputs, DType output) {
  if (op == OpId::logical_not || op == OpId::logical_and || op == OpId::logical_or)
    return DType::bool_;
  if (is_comparison(op)) return compute_dtype(promote_types(inputs[0], inputs[1]));
  if (op == OpId::random_int) return DType::i64;  // then converted to the output's dtype
  return compute_dtype(output);
}

// The column minus the row of the element at linear index kiln_index of a domain whose last two
// dims have kiln_rows and kiln_cols elements.
constexpr std::string_view kColumnMinusRow =
    "(kiln_index % kiln_cols - kiln_index / kiln_cols % kiln_rows)";

bool reads_position(OpId op) {
  return op == OpId::tril || op == OpId::triu;
}

bool reads_index(OpId op) {
  return is_random(op);
}

namespace {

// A random op at element kiln_index from its seed and offset (args, long long), with the
// mapping of runtime/random.h: the helpers compute the Philox words the element needs.
std::optional<std::string> random_expr(OpId op, const OpAttrs& attrs, DType t,
                                       std::span<const std::string> args) {
  bool floating = t == DType::f32 || t == DType::f64;
  std::string call = fmt::format("({}, {}, kiln_index)", args[0], args[1]);
  if (op == OpId::random_uniform) {
    // The top bits of the word, scaled: exact in the output dtype (f16/bf16 compute in f32).
    if (!floating) return std::nullopt;
    int bits = uniform_bits(attrs.dtype);
    return fmt::format("(({})(kiln_random_word{} >> {}) * {})", register_type(t), call, 32 - bits,
                       literal(t, std::ldexp(1.0, -bits)));
  }
  if (op == OpId::random_normal) {
    if (!floating) return std::nullopt;
    return fmt::format("kiln_random_normal{}{}", t == DType::f64 ? "_f64" : "", call);
  }
  // random_int computes in i64 (compute_dtype_of); the range wraps as the CPU's does.
  if (t != DType::i64) return std::nullopt;
  auto range = static_cast<std::uint64_t>(attrs.high) - static_cast<std::uint64_t>(attrs.low);
  std::string low = attrs.low == std::numeric_limits<std::int64_t>::min()
                        ? "(-0x7fffffffffffffffll - 1)"  // its negation is no literal
                        : fmt::format("{}ll", attrs.low);
  return fmt::format("kiln_random_int({}, {}, kiln_index, {}, {}ull)", args[0], args[1], low,
                     range);
}

}  // namespace

std::optional<std::string> elementwise_expr(OpId op, const OpAttrs& attrs, DType t,
                                            std::span<const std::string> args) {
  auto expr = [&](std::string_view pattern) { return std::optional(spell(pattern, t, args)); };
  // libm functions and formulas of floating registers: integer ones are not covered.
  bool floating = t == DType::f32 || t == DType::f64;
  auto real = [&](std::string_view pattern) {
    return floating ? expr(pattern) : std::optional<std::string>();
  };
  // f32 calls a helper of elementwise_helpers.cu.mustache, f64 the libm formula.
  auto fast = [&](std::string_view f32, std::string_view f64) {
    if (!floating) return std::optional<std::string>();
    return expr(t == DType::f32 ? f32 : f64);
  };
  switch (op) {
    case OpId::exp:
      return real("exp{f}({a})");
    case OpId::log:
      return real("log{f}({a})");
    case OpId::log1p:
      return real("log1p{f}({a})");
    case OpId::expm1:
      return real("expm1{f}({a})");
    case OpId::sqrt:
      return real("sqrt{f}({a})");
    // 1/sqrt rather than rsqrt: CUDA's rsqrtf is not correctly rounded.
    case OpId::rsqrt:
      return real("({T}(1) / sqrt{f}({a}))");
    case OpId::reciprocal:
      return real("({T}(1) / {a})");
    case OpId::sin:
      return real("sin{f}({a})");
    case OpId::cos:
      return real("cos{f}({a})");
    case OpId::tanh:
      return fast("kiln_tanh({a})", "tanh({a})");
    case OpId::erf:
      return real("erf{f}({a})");
    // f32: the MUFU forms of templates/elementwise_helpers.cu.mustache (their error bounds are
    // there). f64: two branches keep exp() from overflowing for large |x| (as the CPU kernel).
    case OpId::sigmoid:
      return fast("kiln_sigmoid({a})",
                  "({a} >= 0 ? {T}(1) / ({T}(1) + exp(-{a})) : exp({a}) / ({T}(1) + exp({a})))");
    case OpId::silu:
      return fast("kiln_silu({a})",
                  "({a} * ({a} >= 0 ? {T}(1) / ({T}(1) + exp(-{a})) : exp({a}) / ({T}(1) + "
                  "exp({a}))))");
    case OpId::gelu:
      return fast("kiln_gelu({a})",
                  "({T}(0.5) * {a} * ({T}(1) + erf({a} * {T}(0.70710678118654752440))))");
    case OpId::gelu_tanh:
      return fast("kiln_gelu_tanh({a})",
                  "({T}(0.5) * {a} * ({T}(1) + tanh({T}(0.79788456080286535588) * ({a} + "
                  "{T}(0.044715) * {a} * {a} * {a}))))");
    case OpId::softplus: {
      if (!floating) return std::nullopt;
      std::string beta = literal(t, attrs.beta), threshold = literal(t, attrs.threshold);
      return expr(
          fmt::format("({{a}} * {0} > {1} ? {{a}} : log1p{{f}}(exp{{f}}({{a}} * {0})) / "
                      "{0})",
                      beta, threshold));
    }
    case OpId::neg:
      return t == DType::bool_ ? std::nullopt : expr("(-{a})");
    case OpId::abs:
      return is_integral(t) ? expr("({a} < 0 ? -{a} : {a})") : real("fabs{f}({a})");
    case OpId::relu:
      // NaN stays NaN, as in PyTorch.
      return expr("(({a} != {a} || {a} > {T}(0)) ? {a} : {T}(0))");
    case OpId::sign:
      return expr("{T}(({T}(0) < {a}) - ({a} < {T}(0)))");
    // Integers are already whole.
    case OpId::floor:
      return is_integral(t) ? args[0] : real("floor{f}({a})");
    case OpId::ceil:
      return is_integral(t) ? args[0] : real("ceil{f}({a})");
    case OpId::round:
      return is_integral(t) ? args[0] : real("rint{f}({a})");  // half to even
    case OpId::trunc:
      return is_integral(t) ? args[0] : real("trunc{f}({a})");
    case OpId::logical_not:
      return expr("(!{a})");
    // Index arithmetic on the element's place in the domain (see reads_position): its column
    // minus its row against the diagonal.
    case OpId::tril:
      return expr(fmt::format("({} <= {}ll ? {{a}} : {{T}}(0))", kColumnMinusRow, attrs.diagonal));
    case OpId::triu:
      return expr(fmt::format("({} >= {}ll ? {{a}} : {{T}}(0))", kColumnMinusRow, attrs.diagonal));
    case OpId::add:
      return expr("({a} + {b})");
    case OpId::sub:
      return expr("({a} - {b})");
    case OpId::mul:
      return expr("({a} * {b})");
    case OpId::div:
      return real("({a} / {b})");
    // Integer pow, remainder and floor_divide report what the CPU raises (a negative exponent,
    // a zero divisor) through the kernel's error flag (reports_errors).
    case OpId::pow:
      return is_integral(t) ? expr("kiln_int_pow({a}, {b}, kiln_error)") : real("pow{f}({a}, {b})");
    // NaN propagates through maximum/minimum, as in PyTorch.
    case OpId::maximum:
      return expr("(({a} != {a} || {a} > {b}) ? {a} : {b})");
    case OpId::minimum:
      return expr("(({a} != {a} || {a} < {b}) ? {a} : {b})");
    case OpId::remainder:
      return is_integral(t) ? expr("kiln_int_mod({a}, {b}, kiln_error)")
                            : real("kiln_python_mod({a}, {b})");
    case OpId::floor_divide:
      return is_integral(t) ? expr("kiln_int_floor_div({a}, {b}, kiln_error)")
                            : real("kiln_floor_div({a}, {b})");
    case OpId::eq:
      return expr("({a} == {b})");
    case OpId::ne:
      return expr("({a} != {b})");
    case OpId::lt:
      return expr("({a} < {b})");
    case OpId::le:
      return expr("({a} <= {b})");
    case OpId::gt:
      return expr("({a} > {b})");
    case OpId::ge:
      return expr("({a} >= {b})");
    case OpId::logical_and:
      return expr("({a} && {b})");
    case OpId::logical_or:
      return expr("({a} || {b})");
    case OpId::where:
      return expr("({a} ? {b} : {c})");
    case OpId::cast:
    case OpId::copy:
      return args[0];
    case OpId::random_uniform:
    case OpId::random_normal:
    case OpId::random_int:
      return random_expr(op, attrs, t, args);
      // Not elementwise: reduction, scan, normalization, view, index, matmul, movement and
      // transfer ops have templates or library calls of their own.
#define KILN_HANDLED_elementwise
#include "runtime/op_class_cases.inc"
      return std::nullopt;
  }
  return std::nullopt;
}

bool reports_errors(OpId op, DType t) {
  return (op == OpId::pow || op == OpId::remainder || op == OpId::floor_divide) && is_integral(t) &&
         t != DType::bool_;
}

void raise_expression_error(std::span<const std::int64_t> words) {
  std::int64_t code = words[0], operand = words.size() > 1 ? words[1] : 0;
  // The CPU kernels' messages (runtime/cpu/elementwise.cpp), and where the error was found.
  switch (static_cast<ExpressionError>(code)) {
    case ExpressionError::floor_divide_by_zero:
      throw Error(fmt::format("floor_divide: integer division by zero ({} // 0){}", operand,
                              device_check_note()));
    case ExpressionError::remainder_by_zero:
      throw Error(fmt::format("remainder: integer division by zero ({} % 0){}", operand,
                              device_check_note()));
    case ExpressionError::negative_power:
      throw Error(fmt::format("pow: an integer to the negative integer power {} is not allowed{}",
                              operand, device_check_note()));
  }
  throw Error(fmt::format("codegen: a kernel set its error flag to an unknown code {} ({})", code,
                          operand));
}

std::string node_expr(OpId op, const OpAttrs& attrs, std::span<const DType> in_types,
                      std::span<const std::string> in_exprs, DType out_type,
                      const std::string& what) {
  DType t = compute_dtype_of(op, in_types, out_type);
  std::vector<std::string> args;
  for (std::size_t i = 0; i < in_exprs.size(); ++i) {
    // where's condition stays bool, a random op's seed and offset i64.
    DType want = op == OpId::where && i == 0 ? DType::bool_ : is_random(op) ? in_types[i] : t;
    args.push_back(convert_expr(in_types[i], want, in_exprs[i]));
  }
  auto expr = elementwise_expr(op, attrs, t, args);
  KILN_CHECK(expr.has_value(), "codegen: {} at {} is not covered by code generation yet", what, t);
  return convert_expr(t, out_type, *expr);
}

}  // namespace kiln::jit::codegen
