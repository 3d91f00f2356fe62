// Guard checking. The pass path allocates nothing; reasons are formatted only on failure.
#include "jit/guards.h"

#include "autograd/nn.h"

#include "jit/codegen/lt_matmul.h"
#include "runtime/grad_mode.h"

namespace kiln::jit {

namespace {

std::string symbols_str(const std::vector<std::int64_t>& values) {
  std::vector<std::string> parts;
  for (std::size_t s = 0; s < values.size(); ++s)
    parts.push_back(fmt::format("s{} = {}", s, values[s]));
  return fmt::format("{}", fmt::join(parts, ", "));
}

bool fail(GuardFailure* failure, GuardFailure::Kind kind, std::string reason, int passed) {
  if (failure) {
    failure->kind = kind;
    failure->reason = std::move(reason);
    failure->passed = passed;
  }
  return false;
}

}  // namespace

// The process-wide state the trace ran under: grad mode, autocast, TF32, modules' modes.
bool GuardSet::check_modes(GuardFailure* failure, int passed) const {
  using Kind = GuardFailure::Kind;
  if (kiln::grad_enabled() != grad_enabled)
    return fail(
        failure, Kind::grad_mode,
                fmt::format("grad mode mismatch: expected {}, actual {}",
                    grad_enabled ? "enabled" : "disabled", grad_enabled ? "disabled" : "enabled"),
        passed);
  if (AutocastState now = autocast_state(); !(now == autocast))
    return fail(failure, Kind::autocast,
                fmt::format("autocast mismatch: expected {}, actual {}", autocast_name(autocast),
                            autocast_name(now)),
                passed);
  if (bool now = codegen::allow_tf32(); now != matmul_tf32)
    return fail(failure, Kind::matmul_tf32,
                fmt::format("matmul TF32 mismatch: expected {}, actual {} (set_allow_tf32, "
                            "KILN_MATMUL_TF32)",
                            matmul_tf32 ? "on" : "off", now ? "on" : "off"),
                passed);
  for (const ModuleModeGuard& m : modules)
    if (m.module->is_training() != m.training)
      return fail(failure, Kind::module_mode,
                  fmt::format("module '{}' mode mismatch: expected {}, actual {} (train(), eval())",
                              m.name.empty() ? "(the module)" : m.name,
                              m.training ? "training" : "eval", m.training ? "eval" : "training"),
                  passed);
  return true;
}

bool GuardSet::check(std::span<const CallArg> args, std::vector<std::int64_t>& symbol_values,
                     GuardFailure* failure) const {
  using Kind = GuardFailure::Kind;
  int passed = 0;
  if (args.size() != arg_is_tensor.size())
    return fail(failure, Kind::signature,
                fmt::format("argument count mismatch: expected {}, actual {}", arg_is_tensor.size(),
                            args.size()),
                passed);
  for (std::size_t i = 0; i < args.size(); ++i)
    if (args[i].is_tensor != arg_is_tensor[i])
      return fail(failure, Kind::signature,
                  fmt::format("argument '{}' kind mismatch: expected {}, actual {}", arg_names[i],
                              arg_is_tensor[i] ? "tensor" : "scalar",
                              args[i].is_tensor ? "tensor" : "scalar"),
                  passed);
  ++passed;
  if (!check_modes(failure, passed)) return false;
  symbol_values.assign(num_symbols, -1);
  for (const TensorGuard& g : tensors) {
    const Tensor& t = g.arg_index >= 0 ? *args[g.arg_index].tensor : g.slot ? *g.slot : g.captured;
    if (!t.defined())
      return fail(
          failure, Kind::undefined,
          fmt::format("tensor '{}' is undefined (declared state must hold a tensor)", g.name),
                  passed);
    const TensorImpl& impl = *t.impl_ptr();
    Device device = impl.storage->device();
    if (device != g.device)
      return fail(failure, Kind::device,
                  fmt::format("tensor '{}' device mismatch: expected {}, actual {}", g.name,
                              g.device.str(), t.device().str()),
                  passed);
    ++passed;
    if (impl.dtype != g.dtype)
      return fail(failure, Kind::dtype,
                  fmt::format("tensor '{}' dtype mismatch: expected {}, actual {}", g.name, g.dtype,
                              impl.dtype),
                  passed);
    ++passed;
    if (impl.shape.size() != g.sizes.size())
      return fail(failure, Kind::rank,
                  fmt::format("tensor '{}' rank mismatch: expected {}, actual {}", g.name,
                              g.sizes.size(), impl.shape.size()),
                  passed);
    ++passed;
    for (std::size_t d = 0; d < g.sizes.size(); ++d, ++passed) {
      std::int64_t actual = impl.shape[d];
      int s = g.symbols[d];
      if (s < 0) {
        if (actual != g.sizes[d])
          return fail(failure, Kind::size,
                      fmt::format("tensor '{}' size mismatch at index {}: expected {}, actual {}",
                                  g.name, d, g.sizes[d], actual),
                      passed);
      } else if (symbol_values[s] < 0) {
        if (actual < 2)
          return fail(failure, Kind::size,
                      fmt::format("tensor '{}' size at index {} is dynamic (s{}) and must be >= "
                                  "2, actual {}",
                                  g.name, d, s, actual),
                      passed);
        symbol_values[s] = actual;
      } else if (actual != symbol_values[s]) {
        return fail(failure, Kind::size,
                    fmt::format("tensor '{}' size mismatch at index {}: expected s{} = {}, "
                                "actual {}",
                                g.name, d, s, symbol_values[s], actual),
                    passed);
      }
    }
    ++passed;
    StrideClass sc = stride_class(impl.shape, impl.strides);
    if (sc != g.strides)
      return fail(failure, Kind::strides,
                  fmt::format("tensor '{}' stride mismatch: expected {}, actual {}", g.name,
                              stride_class_name(g.strides), stride_class_name(sc)),
                  passed);
    ++passed;
    if (impl.requires_grad != g.requires_grad)
      return fail(failure, Kind::requires_grad,
                  fmt::format("tensor '{}' requires_grad mismatch: expected {}, actual {}", g.name,
                              g.requires_grad, impl.requires_grad),
                  passed);
  }
  for (const ScalarGuard& g : scalars) {
    ++passed;
    double actual = args[g.arg_index].scalar;
    if (!(actual == g.value))
      return fail(failure, Kind::scalar,
                  fmt::format("scalar '{}' value mismatch: expected {}, actual {}", g.name, g.value,
                              actual),
                  passed);
  }
  for (const SymExpr& e : whole) {
    ++passed;
    if (!e.evaluate(symbol_values))
      return fail(
          failure, Kind::divisibility,
          fmt::format("size {} is not a whole number with {}", e.str(), symbols_str(symbol_values)),
                  passed);
  }
  for (int w : written_args)
    for (std::size_t i = 0; i < args.size(); ++i, ++passed) {
      if (static_cast<int>(i) == w || !args[i].is_tensor || !args[i].tensor->defined()) continue;
      if (args[i].tensor->impl().storage == args[w].tensor->impl().storage)
        return fail(failure, Kind::aliasing,
                    fmt::format("tensor '{}' is written in place and shares memory with '{}'",
                                arg_names[w], arg_names[i]),
                    passed);
    }
  for (const SymExpr& e : at_least_two) {
    ++passed;
    auto v = e.evaluate(symbol_values);
    if (!v || *v < 2)
      return fail(failure, Kind::size_range,
                  fmt::format("size {} is {} with {}, and must be >= 2 as when traced", e.str(),
                              v ? std::to_string(*v) : "not whole", symbols_str(symbol_values)),
                  passed);
  }
  return true;
}

std::size_t GuardSet::count() const {
  std::size_t n = 4 + modules.size() + arg_is_tensor.size() + scalars.size() + whole.size() +
                  at_least_two.size();
  for (const auto& g : tensors) n += 5 + g.sizes.size();
  return n;
}

std::string GuardSet::str() const {
  std::string out = fmt::format("  grad mode: {}\n  autocast: {}\n  matmul TF32: {}\n",
                                grad_enabled ? "enabled" : "disabled", autocast_name(autocast),
                                matmul_tf32 ? "on" : "off");
  for (const ModuleModeGuard& m : modules)
    out += fmt::format("  module '{}': {}\n", m.name, m.training ? "training" : "eval");
  for (const TensorGuard& g : tensors) {
    std::vector<std::string> dims;
    for (std::size_t d = 0; d < g.sizes.size(); ++d)
      dims.push_back(g.symbols[d] >= 0 ? fmt::format("s{}>=2", g.symbols[d])
                                       : std::to_string(g.sizes[d]));
    out += fmt::format(
        "  tensor '{}'{}: device={} dtype={} sizes=[{}] strides={} "
        "requires_grad={}\n",
        g.name,
        g.arg_index >= 0 ? ""
        : g.slot         ? " (state)"
                         : " (captured)",
        g.device.str(), g.dtype, fmt::join(dims, ", "), stride_class_name(g.strides),
        g.requires_grad);
  }
  for (const ScalarGuard& g : scalars)
    out += fmt::format("  scalar '{}': value == {}\n", g.name, g.value);
  for (const SymExpr& e : whole) out += fmt::format("  size {} is a whole number\n", e.str());
  for (const SymExpr& e : at_least_two) out += fmt::format("  size {} >= 2\n", e.str());
  for (int w : written_args)
    out += fmt::format("  tensor '{}' shares memory with no other argument\n", arg_names[w]);
  return out;
}

}  // namespace kiln::jit
