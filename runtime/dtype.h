// Element types, their C++ storage types, and the promotion rules of binary ops.
//
// Promotion (what `a + b` yields), lowest to highest category: bool < integer < floating.
// - Same category: the wider type wins (i8+i32 -> i32, i32+i64 -> i64, f16+f32 -> f32,
//   f32+f64 -> f64).
// - f16 with bf16 -> f32 (neither holds the other).
// - Different categories: the higher category's type (i64 + f16 -> f16, bool + i32 -> i32).
// - A C++ number (runtime/scalar.h) adopts the tensor's dtype unless its category is higher:
//   i32 tensor * 3 -> i32, i32 tensor * 3.0 -> f32, bool tensor + 1 -> i64 (PyTorch's
//   "wrapped number" rule; the category is how the number was written, not its value).
// f16 and bf16 are storage types: ops compute on them in f32 and round the result once.
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <string_view>

#include "runtime/error.h"
#include "runtime/scalar.h"

namespace kiln {

// i8 is last so that the others keep their numbers (kernel cache keys, files written before).
enum class DType : std::uint8_t { bool_, i32, i64, f16, bf16, f32, f64, i8 };

using f16 = Eigen::half;
using bf16 = Eigen::bfloat16;

inline constexpr DType kAllDTypes[] = {DType::bool_, DType::i8,   DType::i32, DType::i64,
                                       DType::f16,   DType::bf16, DType::f32, DType::f64};

std::string_view dtype_name(DType t);
std::size_t itemsize(DType t);
inline bool is_floating(DType t) {
  return t == DType::f16 || t == DType::bf16 || t == DType::f32 || t == DType::f64;
}
inline bool is_integral(DType t) {
  return t == DType::i8 || t == DType::i32 || t == DType::i64;
}
DType promote_types(DType a, DType b);
// The dtype a C++ number of kind `kind` takes next to a tensor of dtype `t` (see above).
DType scalar_result_type(DType t, Scalar::Kind kind);
// The dtype CPU kernels compute in: f16/bf16 widen to f32, everything else is itself.
inline DType compute_dtype(DType t) {
  return (t == DType::f16 || t == DType::bf16) ? DType::f32 : t;
}

template <typename T>
struct DTypeOf;
template <> struct DTypeOf<bool> { static constexpr DType value = DType::bool_; };
template <>
struct DTypeOf<std::int8_t> {
  static constexpr DType value = DType::i8;
};
template <> struct DTypeOf<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct DTypeOf<std::int64_t> { static constexpr DType value = DType::i64; };
template <> struct DTypeOf<f16> { static constexpr DType value = DType::f16; };
template <> struct DTypeOf<bf16> { static constexpr DType value = DType::bf16; };
template <> struct DTypeOf<float> { static constexpr DType value = DType::f32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::f64; };
template <typename T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

// Calls `fn(T{})` with T the storage type of `t`.
template <typename Fn>
decltype(auto) visit_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::bool_: return fn(bool{});
    case DType::i8:
      return fn(std::int8_t{});
    case DType::i32: return fn(std::int32_t{});
    case DType::i64: return fn(std::int64_t{});
    case DType::f16: return fn(f16{});
    case DType::bf16: return fn(bf16{});
    case DType::f32: return fn(float{});
    case DType::f64: return fn(double{});
  }
  throw Error("visit_dtype: invalid dtype");
}

}  // namespace kiln

template <>
struct fmt::formatter<kiln::DType> : fmt::formatter<std::string_view> {
  auto format(kiln::DType t, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(kiln::dtype_name(t), ctx);
  }
};
