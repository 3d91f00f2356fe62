// Sizes that stay symbolic while a function is traced for compilation.
//
// A dynamic dim of a traced tensor is a symbol s_i. Sizes computed from such dims by
// multiplication and exact division stay symbolic as a SymExpr, a monomial with a rational
// coefficient (2*s0, s0*s1, 3*s0/2): what reshape, view, flatten and unflatten produce. A
// SymInt pairs a size's value in the current trace with its expression. Arithmetic on SymInts
// keeps them symbolic; converting one to a plain integer (a comparison, control flow, building a
// Shape) is a size read, which the tracer answers by specializing the symbols involved.
// Outside tracing every SymInt is a constant and behaves as the integer it holds.
#pragma once

#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "runtime/error.h"
#include "runtime/shape.h"

namespace kiln {

class SymExpr {
 public:
  SymExpr() = default;  // the constant 0
  static SymExpr constant(std::int64_t value);
  static SymExpr symbol(int id);
  // A size that follows symbols in a way kiln does not track (a sum such as s0 + 2): it stays
  // correct as long as nothing reads it; a read specializes every symbol.
  static SymExpr opaque();

  bool is_constant() const { return !opaque_ && factors_.empty(); }
  bool is_opaque() const { return opaque_; }
  // The value of a constant expression with an integral coefficient.
  std::int64_t constant_value() const;
  std::int64_t denominator() const { return den_; }
  // (symbol, power) pairs, sorted by symbol; powers are never 0.
  const std::vector<std::pair<int, int>>& factors() const { return factors_; }

  SymExpr operator*(const SymExpr& other) const;
  SymExpr operator/(const SymExpr& other) const;  // exact: the coefficient becomes rational

  // The value with the given symbol values, or nullopt when it is not an integer (or opaque).
  std::optional<std::int64_t> evaluate(std::span<const std::int64_t> symbols) const;
  std::string str() const;  // "4", "s0", "2*s0", "s0*s1/4", "?"

  bool operator==(const SymExpr&) const = default;

 private:
  std::int64_t num_ = 0, den_ = 1;
  std::vector<std::pair<int, int>> factors_;
  bool opaque_ = false;
};

class SymInt {
 public:
  template <std::integral T>
  SymInt(T value)  // NOLINT: implicit, so plain integers pass where sizes are taken
      : value_(static_cast<std::int64_t>(value)), expr_(SymExpr::constant(value_)) {}
  SymInt(std::int64_t value, SymExpr expr) : value_(value), expr_(std::move(expr)) {}

  // The value as a plain integer. While tracing, a read of a symbolic size: the tracer
  // specializes the dims it follows (kiln's own op code reads without reporting).
  operator std::int64_t() const;  // NOLINT: implicit on purpose
  // The value in this trace, without reporting a read: for kiln's op implementations.
  std::int64_t traced_value() const { return value_; }
  const SymExpr& expr() const { return expr_; }
  bool is_symbolic() const { return !expr_.is_constant(); }

  friend SymInt operator*(const SymInt& a, const SymInt& b);
  friend SymInt operator/(const SymInt& a, const SymInt& b);
  friend SymInt operator+(const SymInt& a, const SymInt& b);
  friend SymInt operator-(const SymInt& a, const SymInt& b);
  // Integer operands match exactly here, so `n * 2` stays a SymInt instead of being an
  // ambiguous choice between this and the built-in multiplication.
  template <std::integral T>
  friend SymInt operator*(const SymInt& a, T b) { return a * SymInt(b); }
  template <std::integral T>
  friend SymInt operator*(T a, const SymInt& b) { return SymInt(a) * b; }
  template <std::integral T>
  friend SymInt operator/(const SymInt& a, T b) { return a / SymInt(b); }
  template <std::integral T>
  friend SymInt operator/(T a, const SymInt& b) { return SymInt(a) / b; }
  template <std::integral T>
  friend SymInt operator+(const SymInt& a, T b) { return a + SymInt(b); }
  template <std::integral T>
  friend SymInt operator+(T a, const SymInt& b) { return SymInt(a) + b; }
  template <std::integral T>
  friend SymInt operator-(const SymInt& a, T b) { return a - SymInt(b); }
  template <std::integral T>
  friend SymInt operator-(T a, const SymInt& b) { return SymInt(a) - b; }
  SymInt& operator*=(const SymInt& b) { return *this = *this * b; }

 private:
  std::int64_t value_ = 0;
  SymExpr expr_;
};

// A shape whose entries may be symbolic; built from braces ({-1, n, 4}) or from a Shape.
struct SymShape : std::vector<SymInt> {
  using std::vector<SymInt>::vector;
  SymShape(const Shape& shape);  // NOLINT: implicit, so every Shape is a SymShape
  Shape traced_values() const;   // the sizes in this trace, without reporting a read
  bool is_static() const;
  std::vector<SymExpr> exprs() const;  // empty when every entry is a constant
};

// Tells the tracer that user code turned a symbolic size into a plain integer
// (runtime/trace_hooks.cpp).
void report_sym_read(const SymExpr& expr);

}  // namespace kiln

template <>
struct fmt::formatter<kiln::SymInt> : fmt::formatter<std::int64_t> {
  auto format(const kiln::SymInt& v, format_context& ctx) const {
    return fmt::formatter<std::int64_t>::format(v.traced_value(), ctx);
  }
};
