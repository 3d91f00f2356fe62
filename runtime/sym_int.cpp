// Monomial size expressions and their arithmetic.
#include "runtime/sym_int.h"

#include <algorithm>
#include <numeric>

#include "runtime/trace_hooks.h"

namespace kiln {

namespace {

// Keeps coefficients reduced, so that equal expressions compare equal.
void reduce(std::int64_t& num, std::int64_t& den) {
  if (den < 0) {
    num = -num;
    den = -den;
  }
  std::int64_t g = std::gcd(num, den);
  if (g > 1) {
    num /= g;
    den /= g;
  }
}

std::int64_t checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t out;
  KILN_CHECK(!__builtin_mul_overflow(a, b, &out),
             "size expression: coefficient {} * {} overflows 64 bits", a, b);
  return out;
}

}  // namespace

SymExpr SymExpr::constant(std::int64_t value) {
  SymExpr e;
  e.num_ = value;
  return e;
}

SymExpr SymExpr::symbol(int id) {
  SymExpr e;
  e.num_ = 1;
  e.factors_.push_back({id, 1});
  return e;
}

SymExpr SymExpr::opaque() {
  SymExpr e;
  e.opaque_ = true;
  return e;
}

std::int64_t SymExpr::constant_value() const {
  KILN_CHECK(is_constant() && den_ == 1, "size expression {} is not an integer constant", str());
  return num_;
}

SymExpr SymExpr::operator*(const SymExpr& o) const {
  if (opaque_ || o.opaque_) return opaque();
  SymExpr r;
  r.num_ = checked_mul(num_, o.num_);
  r.den_ = checked_mul(den_, o.den_);
  reduce(r.num_, r.den_);
  if (r.num_ == 0) return constant(0);
  // Merge the sorted factor lists, adding powers and dropping those that cancel.
  std::size_t i = 0, j = 0;
  while (i < factors_.size() || j < o.factors_.size()) {
    if (j == o.factors_.size() || (i < factors_.size() && factors_[i].first < o.factors_[j].first)) {
      r.factors_.push_back(factors_[i++]);
    } else if (i == factors_.size() || o.factors_[j].first < factors_[i].first) {
      r.factors_.push_back(o.factors_[j++]);
    } else {
      int power = factors_[i].second + o.factors_[j].second;
      if (power != 0) r.factors_.push_back({factors_[i].first, power});
      ++i;
      ++j;
    }
  }
  return r;
}

SymExpr SymExpr::operator/(const SymExpr& o) const {
  if (opaque_ || o.opaque_) return opaque();
  KILN_CHECK(o.num_ != 0, "size expression: division of {} by zero", str());
  SymExpr inverse;
  inverse.num_ = o.den_;
  inverse.den_ = o.num_;
  reduce(inverse.num_, inverse.den_);
  for (auto [s, p] : o.factors_) inverse.factors_.push_back({s, -p});
  return *this * inverse;
}

std::optional<std::int64_t> SymExpr::evaluate(std::span<const std::int64_t> symbols) const {
  if (opaque_) return std::nullopt;
  if (factors_.empty() && den_ == 1) return num_;  // a constant: every launch asks for its sizes
  __int128 num = num_, den = den_;
  for (auto [s, p] : factors_) {
    KILN_CHECK(s >= 0 && static_cast<std::size_t>(s) < symbols.size(),
               "size expression {} names symbol s{}, which this call does not bind", str(), s);
    for (int k = 0; k < std::abs(p); ++k) (p > 0 ? num : den) *= symbols[s];
  }
  if (den == 0 || num % den != 0) return std::nullopt;
  return static_cast<std::int64_t>(num / den);
}

std::string SymExpr::str() const {
  if (opaque_) return "?";
  std::string numerator, denominator;
  if (num_ != 1 || factors_.empty()) numerator = std::to_string(num_);
  if (den_ != 1) denominator = std::to_string(den_);
  for (auto [s, p] : factors_) {
    std::string& side = p > 0 ? numerator : denominator;
    for (int k = 0; k < std::abs(p); ++k) side += (side.empty() ? "" : "*") + fmt::format("s{}", s);
  }
  if (numerator.empty()) numerator = "1";
  return denominator.empty() ? numerator : numerator + "/" + denominator;
}

// ---- SymInt ----

SymInt::operator std::int64_t() const {
  if (!expr_.is_constant()) report_sym_read(expr_);
  return value_;
}

SymInt operator*(const SymInt& a, const SymInt& b) {
  return SymInt(a.value_ * b.value_, a.expr_ * b.expr_);
}

SymInt operator/(const SymInt& a, const SymInt& b) {
  KILN_CHECK(b.value_ != 0, "size arithmetic: division of {} by zero", a.value_);
  bool exact = a.value_ % b.value_ == 0;
  if (!a.is_symbolic() && !b.is_symbolic()) return SymInt(a.value_ / b.value_);
  if (exact) return SymInt(a.value_ / b.value_, a.expr_ / b.expr_);
  // A rounded quotient is not a monomial: it specializes what it came from.
  return SymInt(static_cast<std::int64_t>(a) / static_cast<std::int64_t>(b));
}

// Sums are not monomials: a symbolic operand is read (and so specialized).
SymInt operator+(const SymInt& a, const SymInt& b) {
  return SymInt(static_cast<std::int64_t>(a) + static_cast<std::int64_t>(b));
}
SymInt operator-(const SymInt& a, const SymInt& b) {
  return SymInt(static_cast<std::int64_t>(a) - static_cast<std::int64_t>(b));
}

// ---- SymShape ----

SymShape::SymShape(const Shape& shape) {
  reserve(shape.size());
  for (auto d : shape) push_back(SymInt(d));
}

Shape SymShape::traced_values() const {
  Shape out;
  out.reserve(size());
  for (const auto& d : *this) out.push_back(d.traced_value());
  return out;
}

bool SymShape::is_static() const {
  return std::none_of(begin(), end(), [](const SymInt& d) { return d.is_symbolic(); });
}

std::vector<SymExpr> SymShape::exprs() const {
  if (is_static()) return {};
  std::vector<SymExpr> out;
  for (const auto& d : *this) out.push_back(d.expr());
  return out;
}

}  // namespace kiln
