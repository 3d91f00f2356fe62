// Size expressions (sums of monomials) and their arithmetic.
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

std::int64_t checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t out;
  KILN_CHECK(!__builtin_add_overflow(a, b, &out),
             "size expression: coefficient {} + {} overflows 64 bits", a, b);
  return out;
}

__int128 gcd128(__int128 a, __int128 b) {
  while (b != 0) {
    __int128 r = a % b;
    a = b;
    b = r;
  }
  return a;
}

}  // namespace

SymExpr SymExpr::constant(std::int64_t value) {
  SymExpr e;
  if (value != 0) e.terms_.push_back({value, 1, {}});
  return e;
}

SymExpr SymExpr::symbol(int id) {
  SymExpr e;
  e.terms_.push_back({1, 1, {{id, 1}}});
  return e;
}

SymExpr SymExpr::opaque() {
  SymExpr e;
  e.opaque_ = true;
  return e;
}

SymExpr SymExpr::sum_of(std::vector<Term> terms) {
  std::sort(terms.begin(), terms.end(),
            [](const Term& a, const Term& b) { return a.factors < b.factors; });
  SymExpr r;
  for (Term& t : terms) {
    if (!r.terms_.empty() && r.terms_.back().factors == t.factors) {
      Term& last = r.terms_.back();
      // a/b + c/d = (ad + cb) / bd
      last.num = checked_add(checked_mul(last.num, t.den), checked_mul(t.num, last.den));
      last.den = checked_mul(last.den, t.den);
      reduce(last.num, last.den);
    } else {
      r.terms_.push_back(std::move(t));
    }
  }
  std::erase_if(r.terms_, [](const Term& t) { return t.num == 0; });
  return r;
}

bool SymExpr::has_negative_term() const {
  return std::any_of(terms_.begin(), terms_.end(), [](const Term& t) { return t.num < 0; });
}

std::int64_t SymExpr::constant_value() const {
  KILN_CHECK(is_constant() && denominator() == 1, "size expression {} is not an integer constant",
             str());
  return terms_.empty() ? 0 : terms_[0].num;
}

std::int64_t SymExpr::denominator() const {
  std::int64_t d = 1;
  for (const Term& t : terms_) d = std::lcm(d, t.den);
  return d;
}

std::vector<int> SymExpr::symbols() const {
  std::vector<int> out;
  for (const Term& t : terms_)
    for (auto [s, p] : t.factors) out.push_back(s);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

namespace {

// The product of two terms: coefficients multiplied, powers of each symbol added.
template <class Term>
Term term_product(const Term& a, const Term& b) {
  Term r;
  r.num = checked_mul(a.num, b.num);
  r.den = checked_mul(a.den, b.den);
  reduce(r.num, r.den);
  std::size_t i = 0, j = 0;
  while (i < a.factors.size() || j < b.factors.size()) {
    if (j == b.factors.size() ||
        (i < a.factors.size() && a.factors[i].first < b.factors[j].first)) {
      r.factors.push_back(a.factors[i++]);
    } else if (i == a.factors.size() || b.factors[j].first < a.factors[i].first) {
      r.factors.push_back(b.factors[j++]);
    } else {
      int power = a.factors[i].second + b.factors[j].second;
      if (power != 0) r.factors.push_back({a.factors[i].first, power});
      ++i;
      ++j;
    }
  }
  return r;
}

}  // namespace

SymExpr SymExpr::operator*(const SymExpr& o) const {
  if (opaque_ || o.opaque_) return opaque();
  std::vector<Term> terms;
  for (const Term& a : terms_)
    for (const Term& b : o.terms_) terms.push_back(term_product(a, b));
  return sum_of(std::move(terms));
}

SymExpr SymExpr::operator/(const SymExpr& o) const {
  if (opaque_ || o.opaque_) return opaque();
  KILN_CHECK(!o.terms_.empty(), "size expression: division of {} by zero", str());
  if (o.terms_.size() > 1) return *this == o ? constant(1) : opaque();
  const Term& d = o.terms_[0];
  Term inverse{d.den, d.num, {}};
  reduce(inverse.num, inverse.den);
  for (auto [s, p] : d.factors) inverse.factors.push_back({s, -p});
  SymExpr r;
  r.terms_ = {inverse};
  return *this * r;
}

SymExpr SymExpr::operator+(const SymExpr& o) const {
  if (opaque_ || o.opaque_) return opaque();
  std::vector<Term> terms = terms_;
  terms.insert(terms.end(), o.terms_.begin(), o.terms_.end());
  return sum_of(std::move(terms));
}

SymExpr SymExpr::operator-(const SymExpr& o) const {
  return *this + o * constant(-1);
}

std::optional<std::int64_t> SymExpr::evaluate(std::span<const std::int64_t> symbols) const {
  if (opaque_) return std::nullopt;
  if (terms_.empty()) return 0;  // constants first: every launch asks for its sizes
  if (terms_.size() == 1 && terms_[0].factors.empty() && terms_[0].den == 1) return terms_[0].num;
  // The sum as one fraction num/den, reduced after each term so that it stays in 128 bits.
  __int128 num = 0, den = 1;
  for (const Term& t : terms_) {
    __int128 tn = t.num, td = t.den;
    for (auto [s, p] : t.factors) {
      KILN_CHECK(s >= 0 && static_cast<std::size_t>(s) < symbols.size(),
                 "size expression {} names symbol s{}, which this call does not bind", str(), s);
      for (int k = 0; k < std::abs(p); ++k) (p > 0 ? tn : td) *= symbols[s];
    }
    if (td == 0) return std::nullopt;
    num = num * td + tn * den;
    den *= td;
    __int128 g = gcd128(num < 0 ? -num : num, den < 0 ? -den : den);
    if (g > 1) {
      num /= g;
      den /= g;
    }
  }
  if (num % den != 0) return std::nullopt;
  return static_cast<std::int64_t>(num / den);
}

std::string SymExpr::str() const {
  if (opaque_) return "?";
  if (terms_.empty()) return "0";
  auto term_str = [](const Term& t, std::int64_t num) {
    std::string numerator, denominator;
    if (num != 1 || t.factors.empty()) numerator = std::to_string(num);
    if (t.den != 1) denominator = std::to_string(t.den);
    for (auto [s, p] : t.factors) {
      std::string& side = p > 0 ? numerator : denominator;
      for (int k = 0; k < std::abs(p); ++k)
        side += (side.empty() ? "" : "*") + fmt::format("s{}", s);
    }
    if (numerator.empty()) numerator = "1";
    return denominator.empty() ? numerator : numerator + "/" + denominator;
  };
  // Symbolic terms first, the constant last: "s0 + 1", "2*s0 - 1".
  std::vector<const Term*> order;
  for (const Term& t : terms_)
    if (!t.factors.empty()) order.push_back(&t);
  for (const Term& t : terms_)
    if (t.factors.empty()) order.push_back(&t);
  std::string out;
  for (const Term* t : order) {
    if (out.empty()) {
      out = term_str(*t, t->num);
    } else {
      out += t->num < 0 ? " - " : " + ";
      out += term_str(*t, t->num < 0 ? -t->num : t->num);
    }
  }
  return out;
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
  // A rounded quotient is not tracked: it specializes what it came from.
  return SymInt(static_cast<std::int64_t>(a) / static_cast<std::int64_t>(b));
}

SymInt operator+(const SymInt& a, const SymInt& b) {
  if (!a.is_symbolic() && !b.is_symbolic()) return SymInt(a.value_ + b.value_);
  return SymInt(a.value_ + b.value_, a.expr_ + b.expr_);
}
SymInt operator-(const SymInt& a, const SymInt& b) {
  if (!a.is_symbolic() && !b.is_symbolic()) return SymInt(a.value_ - b.value_);
  return SymInt(a.value_ - b.value_, a.expr_ - b.expr_);
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
