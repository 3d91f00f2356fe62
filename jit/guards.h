// A GuardSet states what one trace assumed about a call: the grad mode, the autocast state
// (runtime/autocast.h: the trace holds the casts it made) and whether f32 matmuls may use TF32
// (the plan picks its kernels by it); the training mode of each declared module; for each tensor
// (argument, declared state or captured) its device, dtype, rank, sizes (static, or symbolic
// >= 2), stride class and requires_grad; for each scalar argument its value; and that every
// symbolic size the graph divides is a whole number, that every symbolic size it subtracts
// from (a pad that crops) stays >= 2, as symbols are, and that no argument it writes in place
// shares memory with another. Checked in that fixed order, stopping at
// the first failure, whose reason reads like PyTorch's: "tensor 'x' size mismatch at index 0:
// expected 3, actual 4".
#pragma once

#include <span>
#include <string>
#include <vector>

#include "jit/call_args.h"
#include "runtime/autocast.h"
#include "runtime/tensor.h"

namespace kiln::nn {
class Module;
}

namespace kiln::jit {

struct TensorGuard {
  int arg_index = -1;            // the call argument, or -1
  const Tensor* slot = nullptr;  // declared state: the slot read on every call
  Tensor captured;               // read when neither of the above
  std::string name;
  Device device;
  DType dtype = DType::f32;
  Shape sizes;               // traced sizes; ignored where `symbols` names a symbol
  std::vector<int> symbols;  // per dim: symbol id or -1
  StrideClass strides = StrideClass::contiguous;
  bool requires_grad = false;
};

// A module the function declared (CompileOptions::modules), or one of its submodules: its
// training mode as traced (dropout and batch norm read it).
struct ModuleModeGuard {
  const nn::Module* module = nullptr;
  std::string name;
  bool training = true;
};

struct ScalarGuard {
  int arg_index = 0;
  double value = 0.0;
  std::string name;
};

// What kind of guard failed, and where (for automatic dynamic dims).
struct GuardFailure {
  enum class Kind {
    none,
    signature,
    grad_mode,
    autocast,
    matmul_tf32,
    module_mode,
    undefined,
    device,
    dtype,
    rank,
    size,
    strides,
    requires_grad,
    scalar,
    divisibility,
    size_range,
    aliasing
  };
  Kind kind = Kind::none;
  std::string reason;
  int passed = 0;  // checks that passed before this one: the larger, the closer the entry
};

class GuardSet {
 public:
  std::vector<bool> arg_is_tensor;  // the call signature
  std::vector<std::string> arg_names;
  bool grad_enabled = true;
  AutocastState autocast;
  bool matmul_tf32 = false;  // codegen::allow_tf32() when traced
  std::vector<ModuleModeGuard> modules;
  std::vector<TensorGuard> tensors;
  std::vector<ScalarGuard> scalars;
  std::vector<SymExpr> whole;  // size expressions with a denominator: must divide evenly
  std::vector<SymExpr> at_least_two;  // size expressions with a negative term: must stay >= 2
  std::vector<int> written_args;  // arguments written in place: no other argument may share memory
  int num_symbols = 0;

  // True when every guard passes; then `symbol_values` holds each symbol's size in this call.
  // On failure, `failure` (if given) says why.
  bool check(std::span<const CallArg> args, std::vector<std::int64_t>& symbol_values,
             GuardFailure* failure = nullptr) const;
  std::size_t count() const;  // individual checks, for reporting
  std::string str() const;

 private:
  bool check_modes(GuardFailure* failure, int passed) const;
};

}  // namespace kiln::jit
