// How each reduction op accumulates (see reduction_combine.h).
#include "jit/codegen/reduction_combine.h"

#include <fmt/format.h>

#include "jit/codegen/cuda_expr.h"

namespace kiln::jit::codegen {

bool is_arg_reduction(OpId op) {
  return op == OpId::argmax || op == OpId::argmin || op == OpId::max_dim || op == OpId::min_dim;
}

DType accumulator_dtype(OpId op, DType t) {
  DType a = compute_dtype(t);
  return a == DType::bool_ && op != OpId::sum ? DType::i64 : a;
}

ReductionCombine reduction_combine(OpId op, DType accumulator) {
  std::string A = register_type(accumulator);
  switch (op) {
    case OpId::sum:
      return {"(" + A + ")(0)", fmt::format("[]({0} p, {0} q) {{ return p + q; }}", A)};
    case OpId::prod:
      return {"(" + A + ")(1)", fmt::format("[]({0} p, {0} q) {{ return p * q; }}", A)};
    default:
      break;
  }
  bool is_max = op == OpId::amax || op == OpId::argmax || op == OpId::max_dim;
  const char* wins = is_max ? ">" : "<";
  // NaN propagates (amax) or wins (arg reductions); ties keep the first index.
  if (is_arg_reduction(op))
    return {infinity(accumulator, is_max),
            fmt::format("[]({0} p, long long ip, {0} q, long long iq) {{ return p != p ? (q == q "
                        "|| ip < iq) : (q == q && (p {1} q || (p == q && ip < iq))); }}",
                        A, wins)};
  return {infinity(accumulator, is_max),
          fmt::format("[]({0} p, {0} q) {{ return (p != p || p {1} q) ? p : q; }}", A, wins)};
}

}  // namespace kiln::jit::codegen
