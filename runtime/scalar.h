// A C++ number passed to a tensor op (x * 3, x + 0.5): it remembers whether it was written as a
// boolean, an integer or a floating value, because that decides the result's dtype the way
// PyTorch's Python numbers do: i32_tensor * 3 is i32, i32_tensor * 3.0 is f32 (runtime/dtype.h).
#pragma once

#include <concepts>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "runtime/error.h"
#include "runtime/sym_int.h"

namespace kiln {

class Scalar {
 public:
  enum class Kind : std::uint8_t { boolean, integer, floating };

  template <typename T>
    requires std::is_arithmetic_v<T>
  Scalar(T v) {  // NOLINT: implicit, so that numbers pass where Scalars are taken
    if constexpr (std::is_same_v<T, bool>) {
      kind_ = Kind::boolean;
      int_ = v ? 1 : 0;
    } else if constexpr (std::is_integral_v<T>) {
      if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(std::int64_t))
        KILN_CHECK(v <= static_cast<T>(std::numeric_limits<std::int64_t>::max()),
                   "scalar: {} does not fit a signed 64-bit integer", v);
      kind_ = Kind::integer;
      int_ = static_cast<std::int64_t>(v);
    } else {
      kind_ = Kind::floating;
      float_ = static_cast<double>(v);
    }
  }
  // A size used as a number: its value (reading it specializes a symbolic size).
  Scalar(const SymInt& v) : Scalar(static_cast<std::int64_t>(v)) {}  // NOLINT

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::floating; }
  bool is_integral() const { return kind_ != Kind::floating; }
  double to_double() const { return is_floating() ? float_ : static_cast<double>(int_); }
  // Exact for integers; a floating value is truncated toward zero.
  std::int64_t to_int() const { return is_floating() ? static_cast<std::int64_t>(float_) : int_; }

 private:
  Kind kind_ = Kind::integer;
  std::int64_t int_ = 0;
  double float_ = 0.0;
};

}  // namespace kiln

template <>
struct fmt::formatter<kiln::Scalar> : fmt::formatter<double> {
  auto format(const kiln::Scalar& s, format_context& ctx) const {
    if (s.is_floating()) return fmt::formatter<double>::format(s.to_double(), ctx);
    return fmt::format_to(ctx.out(), "{}", s.to_int());
  }
};
