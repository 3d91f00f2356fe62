// jit::compile: wraps a C++ function over kiln::Tensor so that it is traced on its first call
// and re-traced, with an explained reason, when a call breaks what a trace assumed.
//
//   jit::CompileOptions options;
//   options.name = "block";
//   options.arg_names = {"x", "alpha"};
//   auto f = jit::compile([&](const Tensor& x, double alpha) { return gelu(fc(x)) * alpha; },
//                         options);
//   Tensor y = f(x, 0.5);
//
// Arguments: any mix of Tensor and arithmetic scalars (scalars are guarded by value). Results:
// Tensor, std::vector<Tensor>, std::pair or std::tuple of Tensors, ValuesIndices.
//
// What the function reads: its arguments and the modules it declares (options.modules), whose
// parameter slots are read on every call. Anything else it captures (a tensor, a number in the
// closure) is a constant of the trace; KILN_JIT_VERIFY=N re-traces every N-th call and raises
// StaleCaptureError when such a capture changed.
#pragma once

#include <array>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "jit/compiled_function.h"

namespace kiln::jit {

namespace detail {

template <typename T>
CallArg to_call_arg(const T& value) {
  if constexpr (std::is_same_v<T, Tensor>) {
    KILN_CHECK(value.defined(), "compile: an argument is an undefined tensor");
    return {true, &value, 0.0};
  } else {
    static_assert(std::is_arithmetic_v<T>, "compiled functions take Tensors and scalars");
    return {false, nullptr, static_cast<double>(value)};
  }
}

// Argument `I` for the user's function: the (possibly placeholder) tensor from `args`, or the
// original scalar.
template <std::size_t I, typename T>
decltype(auto) pick(std::span<const CallArg> args, const T& original) {
  if constexpr (std::is_same_v<T, Tensor>)
    return static_cast<const Tensor&>(*args[I].tensor);
  else
    return static_cast<const T&>(original);
}

template <typename R>
struct Outputs;
template <>
struct Outputs<Tensor> {
  static std::vector<Tensor> flatten(const Tensor& t) { return {t}; }
  static Tensor unflatten(std::vector<Tensor>&& v) { return std::move(v.at(0)); }
};
template <>
struct Outputs<std::vector<Tensor>> {
  static std::vector<Tensor> flatten(std::vector<Tensor> v) { return v; }
  static std::vector<Tensor> unflatten(std::vector<Tensor>&& v) { return std::move(v); }
};
template <typename... Ts>
struct Outputs<std::tuple<Ts...>> {
  static_assert((std::is_same_v<Ts, Tensor> && ...), "tuple results must hold Tensors");
  static std::vector<Tensor> flatten(const std::tuple<Ts...>& t) {
    return std::apply([](const auto&... x) { return std::vector<Tensor>{x...}; }, t);
  }
  static std::tuple<Ts...> unflatten(std::vector<Tensor>&& v) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::tuple<Ts...>{std::move(v.at(I))...};
    }(std::index_sequence_for<Ts...>{});
  }
};
template <>
struct Outputs<ValuesIndices> {
  static std::vector<Tensor> flatten(const ValuesIndices& v) { return {v.values, v.indices}; }
  static ValuesIndices unflatten(std::vector<Tensor>&& v) {
    return {std::move(v.at(0)), std::move(v.at(1))};
  }
};
template <>
struct Outputs<std::pair<Tensor, Tensor>> {
  static std::vector<Tensor> flatten(const std::pair<Tensor, Tensor>& p) {
    return {p.first, p.second};
  }
  static std::pair<Tensor, Tensor> unflatten(std::vector<Tensor>&& v) {
    return {std::move(v.at(0)), std::move(v.at(1))};
  }
};

}  // namespace detail

template <typename Fn>
class CompiledFunction {
 public:
  CompiledFunction(Fn fn, CompileOptions options)
      : fn_(std::move(fn)), core_(std::make_shared<CompiledFunctionCore>(std::move(options))) {}

  template <typename... Args>
  auto operator()(const Args&... args) {
    using R = std::decay_t<std::invoke_result_t<Fn&, const Args&...>>;
    std::array<CallArg, sizeof...(Args)> call_args{detail::to_call_arg(args)...};
    auto invoke = [&](std::span<const CallArg> in) {
      return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return detail::Outputs<R>::flatten(fn_(detail::pick<I>(in, args)...));
      }(std::index_sequence_for<Args...>{});
    };
    return detail::Outputs<R>::unflatten(core_->call(call_args, invoke));
  }

  // The entry index a call with these arguments would use, or -1; runs nothing.
  template <typename... Args>
  int lookup(const Args&... args) const {
    std::array<CallArg, sizeof...(Args)> call_args{detail::to_call_arg(args)...};
    return core_->lookup(call_args);
  }

  std::string explain() const { return core_->explain(); }
  std::string graph_dot(int entry = -1) const { return core_->graph_dot(entry); }
  const CompiledFunctionCore& core() const { return *core_; }

 private:
  Fn fn_;
  std::shared_ptr<CompiledFunctionCore> core_;
};

template <typename Fn>
CompiledFunction<Fn> compile(Fn fn, CompileOptions options = {}) {
  return CompiledFunction<Fn>(std::move(fn), std::move(options));
}

}  // namespace kiln::jit
