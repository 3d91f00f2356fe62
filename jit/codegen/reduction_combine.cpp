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
    // amax, amin and the arg reductions below; the others are not reductions
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
  // f32: one max.NaN / min.NaN instruction (sm_80+) instead of a NaN test, a compare and a select.
  if (accumulator == DType::f32)
    return {infinity(accumulator, is_max),
            fmt::format("[](float p, float q) {{ return kiln_{}_nan(p, q); }}",
                        is_max ? "max" : "min")};
  return {infinity(accumulator, is_max),
          fmt::format("[]({0} p, {0} q) {{ return (p != p || p {1} q) ? p : q; }}", A, wins)};
}

}  // namespace kiln::jit::codegen
