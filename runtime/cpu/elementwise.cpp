// Elementwise CPU kernels on Eigen arrays. Inputs are materialized contiguous in the compute
// dtype (f16/bf16 widen to f32), computed, then rounded once to the output dtype.
#include <cmath>
#include <cstring>
#include <numbers>
#include <type_traits>

#include "runtime/cpu/kernels.h"

namespace kiln::cpu {

namespace {

template <typename T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

template <typename T>
ConstArrayMap<T> flat(const Tensor& t) {
  return ConstArrayMap<T>(static_cast<const T*>(t.raw_data()), t.numel());
}
template <typename T>
ArrayMap<T> flat_mut(const Tensor& t) {
  return ArrayMap<T>(static_cast<T*>(t.raw_data()), t.numel());
}

// Rounds a result computed in the compute dtype to the op's output dtype.
Tensor finish(const Tensor& computed, DType out_dtype) {
  if (computed.dtype() == out_dtype) return computed;
  return materialize(computed, computed.shape(), out_dtype);
}

template <typename T>
T sigmoid_of(T x) {
  // Two branches keep exp() from overflowing for large |x|.
  return x >= 0 ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
}

// Every op is listed (here and in the switches below), so that a new op fails to build until
// its CPU kernel is written or it is listed among the ops the function never sees.
template <typename T>
void unary_op(OpId op, const OpAttrs& attrs, ConstArrayMap<T> x, ArrayMap<T> y) {
  constexpr bool floating = std::is_floating_point_v<T>;
  // Formulas of floating values: the ops that use them compute integer inputs in f32.
  auto real = [&](auto formula) {
    if constexpr (floating) y = formula(x);
    else throw Error(fmt::format("{}: not an integer unary op", op));
  };
  switch (op) {
    // exp and sqrt use libm: Eigen 3.4's vectorized versions clamp exp's argument (exp(-inf)
    // gave 2.9e-39 in f32) and, under EIGEN_FAST_MATH, compute f32 sqrt(inf) as NaN.
    case OpId::exp: real([](auto v) { return v.unaryExpr([](T e) { return std::exp(e); }); }); break;
    case OpId::log: real([](auto v) { return v.log(); }); break;
    case OpId::log1p: real([](auto v) { return v.log1p(); }); break;
    case OpId::expm1: real([](auto v) { return v.expm1(); }); break;
    case OpId::sqrt: real([](auto v) { return v.unaryExpr([](T e) { return std::sqrt(e); }); }); break;
    case OpId::rsqrt: real([](auto v) { return v.rsqrt(); }); break;
    case OpId::reciprocal: real([](auto v) { return v.inverse(); }); break;
    case OpId::sin: real([](auto v) { return v.sin(); }); break;
    case OpId::cos: real([](auto v) { return v.cos(); }); break;
    case OpId::tanh: real([](auto v) { return v.tanh(); }); break;
    case OpId::sigmoid:
      real([](auto v) { return v.unaryExpr([](T e) { return sigmoid_of(e); }); });
      break;
    case OpId::silu:
      real([](auto v) { return v.unaryExpr([](T e) { return e * sigmoid_of(e); }); });
      break;
    case OpId::erf: real([](auto v) { return v.unaryExpr([](T e) { return std::erf(e); }); }); break;
    case OpId::gelu:
      real([](auto v) {
        return v.unaryExpr(
            [](T e) { return T(0.5) * e * (T(1) + std::erf(e * T(std::numbers::sqrt2 / 2))); });
      });
      break;
    case OpId::gelu_tanh:
      real([](auto v) {
        return v.unaryExpr([](T e) {
          const T k = T(std::sqrt(2.0 / std::numbers::pi));
          return T(0.5) * e * (T(1) + std::tanh(k * (e + T(0.044715) * e * e * e)));
        });
      });
      break;
    case OpId::softplus: {
      // Linear above the threshold, as in PyTorch (exp would overflow there anyway).
      const T beta = T(attrs.beta), threshold = T(attrs.threshold);
      real([=](auto v) {
        return v.unaryExpr([=](T e) {
          return e * beta > threshold ? e : std::log1p(std::exp(e * beta)) / beta;
        });
      });
      break;
    }
    case OpId::neg: y = -x; break;
    case OpId::abs: y = x.abs(); break;
    case OpId::relu: y = x.max(T(0)); break;
    case OpId::sign: y = x.unaryExpr([](T v) { return T((T(0) < v) - (v < T(0))); }); break;
    // Integers are already whole.
    case OpId::floor:
      if constexpr (floating) y = x.unaryExpr([](T v) { return std::floor(v); });
      else y = x;
      break;
    case OpId::ceil:
      if constexpr (floating) y = x.unaryExpr([](T v) { return std::ceil(v); });
      else y = x;
      break;
    // Ties to even, as PyTorch (the default rounding mode of nearbyint).
    case OpId::round:
      if constexpr (floating) y = x.unaryExpr([](T v) { return std::nearbyint(v); });
      else y = x;
      break;
    case OpId::trunc:
      if constexpr (floating) y = x.unaryExpr([](T v) { return std::trunc(v); });
      else y = x;
      break;
    // logical_not, tril, triu, cast and copy have kernels of their own; the rest are not unary
    // elementwise ops.
    case OpId::logical_not:
    case OpId::tril:
    case OpId::triu:
    case OpId::add:
    case OpId::sub:
    case OpId::mul:
    case OpId::div:
    case OpId::pow:
    case OpId::maximum:
    case OpId::minimum:
    case OpId::remainder:
    case OpId::floor_divide:
    case OpId::eq:
    case OpId::ne:
    case OpId::lt:
    case OpId::le:
    case OpId::gt:
    case OpId::ge:
    case OpId::logical_and:
    case OpId::logical_or:
    case OpId::where:
    case OpId::cast:
    case OpId::copy:
    case OpId::random_uniform:
    case OpId::random_normal:
    case OpId::random_int:
    case OpId::sum:
    case OpId::prod:
    case OpId::amax:
    case OpId::amin:
    case OpId::argmax:
    case OpId::argmin:
    case OpId::max_dim:
    case OpId::min_dim:
    case OpId::cumsum:
    case OpId::softmax:
    case OpId::log_softmax:
    case OpId::sort:
    case OpId::topk:
    case OpId::cached_attention:
    case OpId::reshape:
    case OpId::permute:
    case OpId::expand:
    case OpId::slice:
    case OpId::detach:
    case OpId::gather:
    case OpId::index_select:
    case OpId::scatter_add:
    case OpId::index_add:
    case OpId::index_copy:
    case OpId::matmul:
    case OpId::cat:
    case OpId::pad:
    case OpId::to_device:
    case OpId::attention:
    case OpId::attention_backward:
      throw Error(fmt::format("{}: not a unary op of the elementwise kernels", op));
  }
}

template <typename T>
T int_pow(T base, T exp) {
  KILN_CHECK(exp >= 0, "pow: integer {} to the negative integer power {} is not allowed", base,
             exp);
  // Unsigned arithmetic wraps on overflow (two's complement, as PyTorch's integer pow does)
  // instead of being undefined behaviour.
  using U = std::make_unsigned_t<T>;
  U result = 1, b = static_cast<U>(base);
  while (exp > 0) {
    if (exp & 1) result *= b;
    exp >>= 1;
    if (exp > 0) b *= b;
  }
  return static_cast<T>(result);
}

// Python's %: the result has the divisor's sign (PyTorch's remainder).
template <typename T>
T python_mod(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    T mod = std::fmod(a, b);
    return mod != 0 && (b < 0) != (mod < 0) ? mod + b : mod;
  } else {
    KILN_CHECK(b != 0, "remainder: integer division by zero ({} % 0)", a);
    if (b == -1) return 0;  // also avoids the overflow of INT_MIN % -1
    T mod = a % b;
    return mod != 0 && (b < 0) != (mod < 0) ? mod + b : mod;
  }
}

// Division rounded toward negative infinity, as PyTorch's floor_divide (div_floor_* in ATen).
template <typename T>
T floor_div(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (b == 0) return a / b;  // the IEEE result: inf or NaN
    T mod = std::fmod(a, b);
    T div = (a - mod) / b;
    if (mod != 0 && (b < 0) != (mod < 0)) div -= T(1);
    if (div == 0) return std::copysign(T(0), a / b);
    T floored = std::floor(div);
    return div - floored > T(0.5) ? floored + T(1) : floored;
  } else {
    KILN_CHECK(b != 0, "floor_divide: integer division by zero ({} // 0)", a);
    if (b == -1) return static_cast<T>(0 - static_cast<std::make_unsigned_t<T>>(a));  // wraps
    T quot = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? quot - 1 : quot;
  }
}

template <typename T>
void binary_arith(OpId op, ConstArrayMap<T> a, ConstArrayMap<T> b, ArrayMap<T> y) {
  switch (op) {
    case OpId::add: y = a + b; break;
    case OpId::sub: y = a - b; break;
    case OpId::mul: y = a * b; break;
    case OpId::div: y = a / b; break;
    case OpId::pow:
      if constexpr (std::is_floating_point_v<T>) y = a.pow(b);
      else y = a.binaryExpr(b, [](T u, T v) { return int_pow(u, v); });
      break;
    // maximum/minimum propagate NaN, as PyTorch does.
    case OpId::maximum:
      y = a.binaryExpr(b, [](T u, T v) { return (u != u || u > v) ? u : v; });
      break;
    case OpId::minimum:
      y = a.binaryExpr(b, [](T u, T v) { return (u != u || u < v) ? u : v; });
      break;
    case OpId::remainder: y = a.binaryExpr(b, [](T u, T v) { return python_mod(u, v); }); break;
    case OpId::floor_divide: y = a.binaryExpr(b, [](T u, T v) { return floor_div(u, v); }); break;
    // Comparisons and logical ops have functions of their own; the rest are not binary ops.
    case OpId::exp:
    case OpId::log:
    case OpId::log1p:
    case OpId::expm1:
    case OpId::sqrt:
    case OpId::rsqrt:
    case OpId::reciprocal:
    case OpId::sin:
    case OpId::cos:
    case OpId::tanh:
    case OpId::sigmoid:
    case OpId::gelu:
    case OpId::gelu_tanh:
    case OpId::silu:
    case OpId::erf:
    case OpId::softplus:
    case OpId::neg:
    case OpId::abs:
    case OpId::relu:
    case OpId::sign:
    case OpId::floor:
    case OpId::ceil:
    case OpId::round:
    case OpId::trunc:
    case OpId::logical_not:
    case OpId::tril:
    case OpId::triu:
    case OpId::eq:
    case OpId::ne:
    case OpId::lt:
    case OpId::le:
    case OpId::gt:
    case OpId::ge:
    case OpId::logical_and:
    case OpId::logical_or:
    case OpId::where:
    case OpId::cast:
    case OpId::copy:
    case OpId::random_uniform:
    case OpId::random_normal:
    case OpId::random_int:
    case OpId::sum:
    case OpId::prod:
    case OpId::amax:
    case OpId::amin:
    case OpId::argmax:
    case OpId::argmin:
    case OpId::max_dim:
    case OpId::min_dim:
    case OpId::cumsum:
    case OpId::softmax:
    case OpId::log_softmax:
    case OpId::sort:
    case OpId::topk:
    case OpId::cached_attention:
    case OpId::reshape:
    case OpId::permute:
    case OpId::expand:
    case OpId::slice:
    case OpId::detach:
    case OpId::gather:
    case OpId::index_select:
    case OpId::scatter_add:
    case OpId::index_add:
    case OpId::index_copy:
    case OpId::matmul:
    case OpId::cat:
    case OpId::pad:
    case OpId::to_device:
    case OpId::attention:
    case OpId::attention_backward:
      throw Error(fmt::format("{}: not an arithmetic op", op));
  }
}

template <typename T>
void binary_compare(OpId op, ConstArrayMap<T> a, ConstArrayMap<T> b, ArrayMap<bool> y) {
  switch (op) {
    case OpId::eq: y = (a == b); break;
    case OpId::ne: y = (a != b); break;
    case OpId::lt: y = (a < b); break;
    case OpId::le: y = (a <= b); break;
    case OpId::gt: y = (a > b); break;
    case OpId::ge: y = (a >= b); break;
    case OpId::exp:
    case OpId::log:
    case OpId::log1p:
    case OpId::expm1:
    case OpId::sqrt:
    case OpId::rsqrt:
    case OpId::reciprocal:
    case OpId::sin:
    case OpId::cos:
    case OpId::tanh:
    case OpId::sigmoid:
    case OpId::gelu:
    case OpId::gelu_tanh:
    case OpId::silu:
    case OpId::erf:
    case OpId::softplus:
    case OpId::neg:
    case OpId::abs:
    case OpId::relu:
    case OpId::sign:
    case OpId::floor:
    case OpId::ceil:
    case OpId::round:
    case OpId::trunc:
    case OpId::logical_not:
    case OpId::tril:
    case OpId::triu:
    case OpId::add:
    case OpId::sub:
    case OpId::mul:
    case OpId::div:
    case OpId::pow:
    case OpId::maximum:
    case OpId::minimum:
    case OpId::remainder:
    case OpId::floor_divide:
    case OpId::logical_and:
    case OpId::logical_or:
    case OpId::where:
    case OpId::cast:
    case OpId::copy:
    case OpId::random_uniform:
    case OpId::random_normal:
    case OpId::random_int:
    case OpId::sum:
    case OpId::prod:
    case OpId::amax:
    case OpId::amin:
    case OpId::argmax:
    case OpId::argmin:
    case OpId::max_dim:
    case OpId::min_dim:
    case OpId::cumsum:
    case OpId::softmax:
    case OpId::log_softmax:
    case OpId::sort:
    case OpId::topk:
    case OpId::cached_attention:
    case OpId::reshape:
    case OpId::permute:
    case OpId::expand:
    case OpId::slice:
    case OpId::detach:
    case OpId::gather:
    case OpId::index_select:
    case OpId::scatter_add:
    case OpId::index_add:
    case OpId::index_copy:
    case OpId::matmul:
    case OpId::cat:
    case OpId::pad:
    case OpId::to_device:
    case OpId::attention:
    case OpId::attention_backward:
      throw Error(fmt::format("{}: not a comparison", op));
  }
}

}  // namespace

Tensor unary(OpId op, const Tensor& x, const OpAttrs& attrs, const TensorMeta& out) {
  if (op == OpId::logical_not) {
    Tensor xb = materialize(x, x.shape(), DType::bool_);
    Tensor y = empty(out.shape, DType::bool_);
    flat_mut<bool>(y) = !flat<bool>(xb);
    return y;
  }
  DType ct = compute_dtype(out.dtype);
  Tensor xc = materialize(x, x.shape(), ct);
  Tensor y = empty(out.shape, ct);
  visit_dtype(ct, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, f16> || std::is_same_v<T, bf16>)
      throw DTypeError(fmt::format("{}: not supported for dtype {}", op, ct));
    else
      unary_op<T>(op, attrs, flat<T>(xc), flat_mut<T>(y));
  });
  return finish(y, out.dtype);
}

Tensor binary(OpId op, const Tensor& a, const Tensor& b, const TensorMeta& out) {
  if (op == OpId::logical_and || op == OpId::logical_or) {
    Tensor ab = materialize(a, out.shape, DType::bool_), bb = materialize(b, out.shape, DType::bool_);
    Tensor y = empty(out.shape, DType::bool_);
    if (op == OpId::logical_and) flat_mut<bool>(y) = flat<bool>(ab) && flat<bool>(bb);
    else flat_mut<bool>(y) = flat<bool>(ab) || flat<bool>(bb);
    return y;
  }
  bool compare = out.dtype == DType::bool_;
  DType ct = compute_dtype(compare ? promote_types(a.dtype(), b.dtype()) : out.dtype);
  Tensor ac = materialize(a, out.shape, ct), bc = materialize(b, out.shape, ct);
  Tensor y = empty(out.shape, compare ? DType::bool_ : ct);
  visit_dtype(ct, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) {
      throw DTypeError(fmt::format("{}: unexpected compute dtype {}", op, ct));
    } else if constexpr (std::is_same_v<T, bool>) {
      // Only comparisons reach here with bool operands (arithmetic on bool is rejected).
      auto ai = flat<bool>(ac).template cast<int>(), bi = flat<bool>(bc).template cast<int>();
      Eigen::Array<int, Eigen::Dynamic, 1> ae = ai, be = bi;
      binary_compare<int>(op, ConstArrayMap<int>(ae.data(), ae.size()),
                          ConstArrayMap<int>(be.data(), be.size()), flat_mut<bool>(y));
    } else if (compare) {
      binary_compare<T>(op, flat<T>(ac), flat<T>(bc), flat_mut<bool>(y));
    } else {
      binary_arith<T>(op, flat<T>(ac), flat<T>(bc), flat_mut<T>(y));
    }
  });
  return finish(y, out.dtype);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, const TensorMeta& out) {
  DType ct = compute_dtype(out.dtype);
  Tensor cc = materialize(cond, out.shape, DType::bool_);
  Tensor ac = materialize(a, out.shape, ct), bc = materialize(b, out.shape, ct);
  Tensor y = empty(out.shape, ct);
  visit_dtype(ct, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>)
      throw DTypeError(fmt::format("where: unexpected compute dtype {}", ct));
    else
      flat_mut<T>(y) = flat<bool>(cc).select(flat<T>(ac), flat<T>(bc));
  });
  return finish(y, out.dtype);
}

}  // namespace kiln::cpu

namespace kiln::cpu {

Tensor triangle(OpId op, const Tensor& x, std::int64_t diagonal, const TensorMeta& out) {
  Tensor y = materialize_copy(x, out.dtype);
  std::int64_t rows = out.shape[out.shape.size() - 2], cols = out.shape.back();
  std::int64_t batches = rows * cols == 0 ? 0 : numel(out.shape) / (rows * cols);
  std::size_t bytes = itemsize(out.dtype);
  char* base = static_cast<char*>(y.raw_data());
  // tril keeps column - row <= diagonal, triu keeps column - row >= diagonal.
  for (std::int64_t b = 0; b < batches; ++b)
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j) {
        bool keep = op == OpId::tril ? j - i <= diagonal : j - i >= diagonal;
        if (!keep) std::memset(base + ((b * rows + i) * cols + j) * bytes, 0, bytes);
      }
  return y;
}

}  // namespace kiln::cpu
