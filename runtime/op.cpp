// What the op table derives: the op list, and printing, equality and hashing of the attributes
// each op reads.
#include "runtime/op.h"

#include <array>
#include <bit>
#include <cstring>
#include <functional>

namespace kiln {

std::span<const OpId> all_ops() {
  static const auto ops = [] {
    std::array<OpId, kNumOps> out{};
    for (std::size_t i = 0; i < kNumOps; ++i) out[i] = static_cast<OpId>(i);
    return out;
  }();
  return ops;
}

namespace {

// The target shape of reshape/expand: symbolic entries, when present, are what identifies it.
struct ShapeAttr {
  const Shape& shape;
  const std::vector<SymExpr>& exprs;
};

// Calls visit(name, field_of_a...) for every attribute `op` reads, in one fixed order, with the
// same field of each OpAttrs given.
template <typename Visit, typename... Attrs>
void for_each_attr(OpId op, Visit&& visit, const Attrs&... a) {
  AttrSet set = op_def(op).attrs;
  if (set & attr::dims) visit("dims", a.dims...);
  if (set & attr::shape) visit("shape", ShapeAttr{a.shape, a.shape_exprs}...);
  if (set & attr::dim) visit("dim", a.dim...);
  if (set & attr::range) {
    visit("start", a.start...);
    visit("end", a.end...);
    visit("step", a.step...);
  }
  if (set & attr::keepdim) visit("keepdim", a.keepdim...);
  if (set & attr::reverse) visit("reverse", a.reverse...);
  if (set & attr::count) visit("k", a.k...);
  if (set & attr::descending) visit("descending", a.descending...);
  if (set & attr::diagonal) visit("diagonal", a.diagonal...);
  if (set & attr::value) visit("value", a.value...);
  if (set & attr::beta) visit("beta", a.beta...);
  if (set & attr::threshold) visit("threshold", a.threshold...);
  if (set & attr::scale) visit("scale", a.scale...);
  if (set & attr::causal) visit("causal", a.causal...);
  if (set & attr::dropout) visit("dropout", a.dropout...);
  if (set & attr::dtype) visit("dtype", a.dtype...);
  if (set & attr::device) visit("device", a.device...);
  if (set & attr::bounds) {
    visit("low", a.low...);
    visit("high", a.high...);
  }
}

template <typename T>
bool field_equal(const T& a, const T& b) {
  if constexpr (std::is_same_v<T, double>)  // by bits: NaN equals NaN, -0.0 differs from 0.0
    return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
  else if constexpr (std::is_same_v<T, ShapeAttr>)  // symbolic entries compare by expression
    return a.exprs == b.exprs && (!a.exprs.empty() || a.shape == b.shape);
  else
    return a == b;
}

void hash_combine(std::size_t& seed, std::size_t h) {
  seed ^= h + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);
}

template <typename T>
void hash_field(std::size_t& seed, const T& v) {
  if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
    for (auto x : v) hash_combine(seed, std::hash<std::int64_t>{}(x));
  } else if constexpr (std::is_same_v<T, ShapeAttr>) {
    if (v.exprs.empty()) return hash_field(seed, v.shape);
    for (const auto& e : v.exprs) hash_combine(seed, std::hash<std::string>{}(e.str()));
  } else if constexpr (std::is_same_v<T, double>) {
    hash_combine(seed, std::hash<std::uint64_t>{}(std::bit_cast<std::uint64_t>(v)));
  } else if constexpr (std::is_same_v<T, DType>) {
    hash_combine(seed, static_cast<std::size_t>(v));
  } else if constexpr (std::is_same_v<T, Device>) {
    hash_combine(seed, static_cast<std::size_t>(v.type) * 131 + static_cast<std::size_t>(v.index));
  } else {
    hash_combine(seed, std::hash<T>{}(v));
  }
}

template <typename T>
std::string field_str(const T& v) {
  if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
    return fmt::format("[{}]", fmt::join(v, ", "));
  } else if constexpr (std::is_same_v<T, ShapeAttr>) {
    if (v.exprs.empty()) return shape_str(v.shape);
    std::vector<std::string> parts;
    for (const auto& e : v.exprs) parts.push_back(e.str());
    return fmt::format("[{}]", fmt::join(parts, ", "));
  } else if constexpr (std::is_same_v<T, Device>) {
    return v.str();
  } else {
    return fmt::format("{}", v);
  }
}

}  // namespace

bool attrs_equal(OpId op, const OpAttrs& a, const OpAttrs& b) {
  bool equal = true;
  for_each_attr(
      op, [&](std::string_view, const auto& x, const auto& y) { equal = equal && field_equal(x, y); },
      a, b);
  return equal;
}

std::size_t attrs_hash(OpId op, const OpAttrs& a) {
  std::size_t seed = static_cast<std::size_t>(op);
  for_each_attr(op, [&](std::string_view, const auto& x) { hash_field(seed, x); }, a);
  return seed;
}

std::string attrs_str(OpId op, const OpAttrs& a) {
  std::vector<std::string> parts;
  for_each_attr(
      op,
      [&](std::string_view name, const auto& x) {
        // Attention without dropout prints as it did before the rate existed.
        if (name == "dropout" && a.dropout == 0.0) return;
        parts.push_back(fmt::format("{}={}", name, field_str(x)));
      },
      a);
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace kiln
