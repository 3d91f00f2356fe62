// Sizes that stay symbolic while a function is traced for compilation.
//
// A dynamic dim of a traced tensor is a symbol s_i. Sizes computed from such dims by
// multiplication, exact division, addition and subtraction stay symbolic as a SymExpr, a sum of
// monomials with rational coefficients (2*s0, s0*s1, 3*s0/2, s0 + 1): what reshape, flatten,
// cat and pad produce. A SymInt pairs a size's value in the current trace with its expression.
// Arithmetic on SymInts keeps them symbolic; converting one to a plain integer (a comparison,
// control flow, building a Shape) is a size read, which the tracer answers by specializing the
// symbols involved. Outside tracing every SymInt is a constant and behaves as the integer it holds.
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
  // A size that follows symbols in a way kiln does not track (a rounded quotient such as
  // (s0 - 1) / 2 + 1): it stays correct as long as nothing reads it; a read specializes every
  // symbol.
  static SymExpr opaque();

  bool is_constant() const { return !opaque_ && (terms_.empty() || is_term_constant(0)); }
  bool is_opaque() const { return opaque_; }
  // One term (2*s0, s0/s1): what reshapes make. A sum (s0 + 1) is not.
  bool is_monomial() const { return !opaque_ && terms_.size() <= 1; }
  // Whether some term is subtracted (s0 - 1): such a size is not positive at every symbol value.
  bool has_negative_term() const;
  // The value of a constant expression with an integral coefficient.
  std::int64_t constant_value() const;
  // The least common denominator of the coefficients (1 when none divides).
  std::int64_t denominator() const;
  // The symbols the expression names, sorted.
  std::vector<int> symbols() const;

  SymExpr operator*(const SymExpr& other) const;
  // Exact: the coefficients become rational. A sum divided by a sum is opaque.
  SymExpr operator/(const SymExpr& other) const;
  SymExpr operator+(const SymExpr& other) const;
  SymExpr operator-(const SymExpr& other) const;

  // The value with the given symbol values, or nullopt when it is not an integer (or opaque).
  std::optional<std::int64_t> evaluate(std::span<const std::int64_t> symbols) const;
  std::string str() const;  // "4", "s0", "2*s0", "s0*s1/4", "s0 + 1", "?"

  bool operator==(const SymExpr&) const = default;

 private:
  // coefficient num/den times the product of symbols to their powers; (symbol, power) pairs are
  // sorted by symbol and powers are never 0.
  struct Term {
    std::int64_t num = 0, den = 1;
    std::vector<std::pair<int, int>> factors;
    bool operator==(const Term&) const = default;
  };
  static SymExpr sum_of(std::vector<Term> terms);  // merges like terms, drops zeros, sorts
  bool is_term_constant(std::size_t i) const {
    return terms_.size() == 1 && terms_[i].factors.empty();
  }

  std::vector<Term> terms_;  // canonical: sorted by factors, none with a zero coefficient
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
