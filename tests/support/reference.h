// Shared helpers for kiln's forward test suites: building tensors from host vectors, comparing a
// tensor's values with an independently computed reference (exactly, or within a tolerance),
// rounding host values the way f16/bf16 storage does, and checking exception messages.
// Nothing here calls an op under test except to read values back (to_vector).
#pragma once

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include "autograd/ops.h"
#include "runtime/grad_mode.h"

namespace kiln {
// Lets BOOST_TEST print dtypes in failure messages (Boost.Test's customization point).
inline std::ostream& boost_test_print_type(std::ostream& os, DType t) {
  return os << dtype_name(t);
}
}  // namespace kiln

namespace kiln::test {

// ---- building tensors from host values ----
inline Tensor f32s(std::vector<float> v, const Shape& s) {
  return from_vector(v, s);
}
inline Tensor f64s(std::vector<double> v, const Shape& s) {
  return from_vector(v, s);
}
inline Tensor i64s(std::vector<std::int64_t> v, const Shape& s) {
  return from_vector(v, s);
}
inline Tensor i32s(std::vector<std::int32_t> v, const Shape& s) {
  return from_vector(v, s);
}
inline Tensor bools(std::vector<bool> v, const Shape& s) {
  return from_vector(v, s);
}
inline Tensor f32s(std::vector<float> v) {
  return from_vector(v);
}
inline Tensor f64s(std::vector<double> v) {
  return from_vector(v);
}
inline Tensor i64s(std::vector<std::int64_t> v) {
  return from_vector(v);
}

// A tensor of `dtype` holding `values`, written element by element in the storage type (no
// kiln cast involved). f16/bf16 values are rounded from f32, as Eigen's conversions do.
inline Tensor typed(DType dtype, const std::vector<double>& values, const Shape& shape) {
  return visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> out;
    for (double v : values) {
      if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>)
        out.push_back(T(static_cast<float>(v)));
      else if constexpr (std::is_same_v<T, bool>)
        out.push_back(v != 0);
      else
        out.push_back(static_cast<T>(v));
    }
    return from_vector(out, shape);
  });
}

// Deterministic values in [lo, hi) from a small LCG (independent of kiln's generator).
inline std::vector<double> host_random(std::size_t n, double lo, double hi,
                                       std::uint64_t seed = 1) {
  std::vector<double> out(n);
  std::uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (auto& v : out) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    v = lo + (hi - lo) * static_cast<double>(s >> 11) * 0x1.0p-53;
  }
  return out;
}

// n draws of a normal distribution with mean 0 and standard deviation `scale`.
inline std::vector<double> normal_values(std::size_t n, std::mt19937& rng, double scale = 1.0) {
  std::normal_distribution<double> dist(0.0, scale);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Same values rounded to f32 (so an f32 tensor and its f64 reference agree on the input).
inline std::vector<double> as_f32(std::vector<double> v) {
  for (auto& x : v) x = static_cast<float>(x);
  return v;
}

inline double round_to(DType dtype, double v) {
  switch (dtype) {
    case DType::f16:
      return static_cast<float>(f16(static_cast<float>(v)));
    case DType::bf16:
      return static_cast<float>(bf16(static_cast<float>(v)));
    case DType::f32:
      return static_cast<float>(v);
    case DType::i8:  // wrapped modulo 256, as a conversion to i8 narrows
      return static_cast<std::int8_t>(static_cast<std::int64_t>(v));
    default:
      return v;
  }
}
inline std::vector<double> round_to(DType dtype, std::vector<double> v) {
  for (auto& x : v) x = round_to(dtype, x);
  return v;
}

// Row-major offset of `index` in a contiguous tensor of `shape`.
inline std::int64_t flat_index(const Shape& shape, const std::vector<std::int64_t>& index) {
  std::int64_t off = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) off = off * shape[d] + index[d];
  return off;
}
// The multi-index of row-major element `i` of `shape`.
inline std::vector<std::int64_t> unflatten(const Shape& shape, std::int64_t i) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}

// ---- comparisons ----
inline bool same_value(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}
inline bool near_value(double got, double want, double rtol, double atol) {
  if (std::isnan(want) || std::isinf(want)) return same_value(got, want);
  return std::abs(got - want) <= atol + rtol * std::abs(want);
}

// Checks shape, dtype (when given) and every value exactly (NaN equals NaN).
inline void check_values(const Tensor& got, const Shape& shape, const std::vector<double>& want) {
  BOOST_TEST_REQUIRE(shape_str(got.shape()) == shape_str(shape));
  auto v = got.to_vector<double>();
  BOOST_TEST_REQUIRE(v.size() == want.size());
  int reported = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!same_value(v[i], want[i]) && reported++ < 8)
      BOOST_ERROR("element " << i << ": got " << v[i] << ", expected " << want[i]);
  }
}
inline void check_values(const Tensor& got, const Shape& shape, DType dtype,
                         const std::vector<double>& want) {
  BOOST_TEST(dtype_name(got.dtype()) == dtype_name(dtype));
  check_values(got, shape, want);
}

// Checks shape and every value within atol + rtol * |want| (NaN and infinities exactly).
inline void check_close(const Tensor& got, const Shape& shape, const std::vector<double>& want,
                        double rtol, double atol) {
  BOOST_TEST_REQUIRE(shape_str(got.shape()) == shape_str(shape));
  auto v = got.to_vector<double>();
  BOOST_TEST_REQUIRE(v.size() == want.size());
  int reported = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!near_value(v[i], want[i], rtol, atol) && reported++ < 8)
      BOOST_ERROR("element " << i << ": got " << v[i] << ", expected " << want[i] << " (rtol "
                             << rtol << ", atol " << atol << ")");
  }
}

// A tolerance that admits the rounding of one result to `dtype` (plus a little compute error).
inline double rtol_for(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return 0x1.0p-10;
    case DType::bf16:
      return 0x1.0p-7;
    case DType::f32:
      return 4e-6;
    default:
      return 1e-13;
  }
}
inline double atol_for(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return 1e-4;
    case DType::bf16:
      return 1e-3;
    case DType::f32:
      return 1e-6;
    default:
      return 1e-14;
  }
}

inline bool shares_storage(const Tensor& a, const Tensor& b) {
  return a.impl().storage == b.impl().storage;
}

// ---- exceptions ----
// Predicate for BOOST_CHECK_EXCEPTION: the message holds every substring.
struct MessageHas {
  std::vector<std::string> parts;
  bool operator()(const std::exception& e) const {
    std::string what = e.what();
    bool ok = true;
    for (const auto& p : parts) {
      if (what.find(p) == std::string::npos) {
        BOOST_TEST_MESSAGE("message \"" << what << "\" lacks \"" << p << "\"");
        ok = false;
      }
    }
    if (!ok) BOOST_ERROR("exception message: " << what);
    return ok;
  }
};
inline MessageHas message_has(std::initializer_list<std::string> parts) {
  return MessageHas{std::vector<std::string>(parts)};
}

}  // namespace kiln::test

// Checks that `stmt` throws exactly `Type` (or a subclass) with a message holding every given
// substring; another exception type is reported as a failure instead of aborting the test case.
#define KILN_CHECK_THROWS(stmt, Type, ...)                                              \
  do {                                                                                  \
    try {                                                                               \
      BOOST_CHECK_EXCEPTION(stmt, Type, ::kiln::test::message_has({__VA_ARGS__}));      \
    } catch (const std::exception& wrong_) {                                            \
      BOOST_ERROR(#stmt " threw " << typeid(wrong_).name() << " instead of " #Type ": " \
                                  << wrong_.what());                                    \
    }                                                                                   \
  } while (0)
