// Sample calls of every primitive op in the table (runtime/ops.def), for sweeps that run each op
// several ways and compare: eager against traced-and-run and finite differences (test_op_table),
// CPU against generated kernels (test_cuda_eager, test_codegen_*, test_jit_cuda), the fuser's
// invariants (test_fusion). Each sample calls the op through the public API on deterministic
// inputs chosen inside the op's domain and away from its kinks (so finite differences apply).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "runtime/dispatch.h"

namespace kiln::test {

struct OpSample {
  std::string label;
  std::vector<Tensor> inputs;
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> run;
};

// The dtypes a sweep runs `op` in; f64 samples are the ones gradchecked.
std::vector<DType> sample_dtypes(OpId op);
// Samples of `op` at `dtype` (one of sample_dtypes(op)); empty when the op has none.
std::vector<OpSample> op_samples(OpId op, DType dtype);

// ---- implementation ----

namespace samples_detail {

// Uniform values in [lo, hi) as `dtype` (integers rounded toward zero, bools by threshold).
inline Tensor values(const Shape& shape, DType dtype, double lo, double hi, std::uint64_t seed) {
  Generator gen(seed);
  Tensor u = rand(shape, DType::f64, &gen) * (hi - lo) + lo;
  if (dtype == DType::bool_) return gt(u, (lo + hi) / 2);
  return u.to(dtype);
}

inline std::vector<Tensor> one(Tensor t) { return {std::move(t)}; }

// A random op drawing `shape` in `dtype` from the seed and offset it is given (0-dim i64 inputs:
// on the device the draw runs on, as the sweeps move every input), dispatched as random.h does.
inline std::vector<OpSample> random_draws(OpId op, DType dtype) {
  auto draw = [op, dtype](Shape shape, std::int64_t low, std::int64_t high) {
    return [=](const std::vector<Tensor>& in) {
      OpAttrs attrs;
      attrs.shape = shape;
      attrs.dtype = dtype;
      attrs.device = in[0].device();
      attrs.low = low;
      attrs.high = high;
      return dispatch(op, in, attrs);
    };
  };
  auto number = [](std::int64_t v) { return from_vector(std::vector<std::int64_t>{v}, Shape{}); };
  // A range past 2^32 for i64; small ones elsewhere (an f32 holds every value of it).
  std::int64_t wide = dtype == DType::i64 ? std::int64_t{1} << 40 : 1000;
  std::string name(op_name(op));
  return {
      OpSample{name + " [3, 5] seed 7 offset 3", {number(7), number(3)}, draw({3, 5}, -3, 4)},
      // A seed and an offset with both 32-bit halves set; the counter's high word changes.
      OpSample{name + " [2, 1, 9] large seed and offset",
               {number(0x123456789abcdefll), number((std::int64_t{1} << 32) - 2)},
               draw({2, 1, 9}, -wide, wide + 7)},
  };
}

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

inline OpSample sample(std::string label, std::vector<Tensor> inputs, Fn run) {
  return {std::move(label), std::move(inputs), std::move(run)};
}

// A unary op on two shapes, one a transposed view (strided input).
inline std::vector<OpSample> unary(const std::string& name, DType t, double lo, double hi,
                                   std::function<Tensor(const Tensor&)> fn) {
  return {
      sample(name + " [3, 4]", {values({3, 4}, t, lo, hi, 1)}, [fn](auto& in) { return one(fn(in[0])); }),
      sample(name + " transposed [5, 2]", {values({2, 5}, t, lo, hi, 2)},
             [fn](auto& in) { return one(fn(in[0].t())); }),
  };
}

// A binary op with broadcasting, and with a number on one side.
inline std::vector<OpSample> binary(const std::string& name, DType t, double lo, double hi,
                                    std::function<Tensor(const Tensor&, const Tensor&)> fn,
                                    double b_lo, double b_hi) {
  return {
      sample(name + " [2, 3] . [3]", {values({2, 3}, t, lo, hi, 3), values({3}, t, b_lo, b_hi, 4)},
             [fn](auto& in) { return one(fn(in[0], in[1])); }),
      sample(name + " [4, 1] . [1, 3]", {values({4, 1}, t, lo, hi, 5), values({1, 3}, t, b_lo, b_hi, 6)},
             [fn](auto& in) { return one(fn(in[0], in[1])); }),
  };
}

}  // namespace samples_detail

inline std::vector<DType> sample_dtypes(OpId op) {
  using enum DType;
  const OpDef& def = op_def(op);
  switch (op) {
    case OpId::logical_not: return {bool_, f32};
    case OpId::logical_and:
    case OpId::logical_or: return {bool_};
    case OpId::eq:
    case OpId::ne: return {f64, i64, bool_};
    case OpId::cast:
    case OpId::copy: return {f64, i32, bool_};
    case OpId::where: return {f64, i32};
    case OpId::cumsum: return {f64, i32, bool_};
    case OpId::argmax:
    case OpId::argmin: return {f64, i32};
    case OpId::max_dim:
    case OpId::min_dim: return {f64, f32, i64};
    case OpId::sort:
    case OpId::topk:
      return {f64, f32, bf16, i32, bool_};
    case OpId::softmax:
    case OpId::log_softmax: return {f64, f32, bf16, f16};
    case OpId::tril:
    case OpId::triu: return {f64, i64};
    case OpId::matmul:
    case OpId::attention:
    case OpId::attention_backward: return {f64, f32};
    case OpId::cached_attention:
      return {f64, f32, bf16};
    case OpId::gather:
    case OpId::index_select:
    case OpId::scatter_add:
    case OpId::index_add:
    case OpId::index_copy:
    case OpId::to_device: return {f64};
    case OpId::div: return {f64, f32, i32};
    // A random op's dtype is its output's (its seed and offset are i64).
    case OpId::random_uniform:
    case OpId::random_normal:
      return {f64, f32, bf16, f16};
    case OpId::random_int:
      return {i64, i32, f32};
    // The others take their class's dtypes; a new op must be placed here or above.
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
    case OpId::add:
    case OpId::sub:
    case OpId::mul:
    case OpId::pow:
    case OpId::maximum:
    case OpId::minimum:
    case OpId::remainder:
    case OpId::floor_divide:
    case OpId::lt:
    case OpId::le:
    case OpId::gt:
    case OpId::ge:
      if (def.dtype_rule == DTypeRule::to_floating) return {f64, f32, bf16, i64};
      if (def.dtype_rule == DTypeRule::to_bool) return {f64, i64};
      return {f64, f32, f16, i32, i64};
    case OpId::sum:
    case OpId::prod:
    case OpId::amax:
    case OpId::amin:
      return {f64, f32, i64};
    case OpId::reshape:
    case OpId::permute:
    case OpId::expand:
    case OpId::slice:
    case OpId::detach:
    case OpId::cat:
    case OpId::pad:
      return {f64, i64};
  }
  return {};
}

inline std::vector<OpSample> op_samples(OpId op, DType t) {
  using namespace samples_detail;
  std::string n(op_name(op));
  bool integral = !is_floating(t);
  switch (op) {
    // ---- unary, floating ----
    case OpId::exp: return unary(n, t, -2, 2, [](auto& x) { return exp(x); });
    case OpId::log: return unary(n, t, 1, 4, [](auto& x) { return log(x); });
    case OpId::log1p: return unary(n, t, 0, 3, [](auto& x) { return log1p(x); });
    case OpId::expm1: return unary(n, t, -2, 2, [](auto& x) { return expm1(x); });
    case OpId::sqrt: return unary(n, t, 1, 5, [](auto& x) { return sqrt(x); });
    case OpId::rsqrt: return unary(n, t, 1, 5, [](auto& x) { return rsqrt(x); });
    case OpId::reciprocal: return unary(n, t, 1, 4, [](auto& x) { return reciprocal(x); });
    case OpId::sin: return unary(n, t, -3, 3, [](auto& x) { return sin(x); });
    case OpId::cos: return unary(n, t, -3, 3, [](auto& x) { return cos(x); });
    case OpId::tanh: return unary(n, t, -2, 2, [](auto& x) { return tanh(x); });
    case OpId::sigmoid: return unary(n, t, -3, 3, [](auto& x) { return sigmoid(x); });
    case OpId::gelu: return unary(n, t, -3, 3, [](auto& x) { return gelu(x); });
    case OpId::gelu_tanh:
      return unary(n, t, -3, 3, [](auto& x) { return gelu(x, GeluApproximation::tanh); });
    case OpId::silu: return unary(n, t, -3, 3, [](auto& x) { return silu(x); });
    case OpId::erf: return unary(n, t, -2, 2, [](auto& x) { return erf(x); });
    case OpId::softplus:  // beta 2, threshold 3: both branches appear in [-3, 3)
      return unary(n, t, -3, 3, [](auto& x) { return softplus(x, 2.0, 3.0); });
    // ---- unary, same dtype ----
    case OpId::neg: return unary(n, t, -5, 5, [](auto& x) { return neg(x); });
    case OpId::abs: return unary(n, t, -5, 5, [](auto& x) { return abs(x); });
    case OpId::relu: return unary(n, t, -5, 5, [](auto& x) { return relu(x); });
    case OpId::sign: return unary(n, t, -5, 5, [](auto& x) { return sign(x); });
    case OpId::floor: return unary(n, t, -5, 5, [](auto& x) { return floor(x); });
    case OpId::ceil: return unary(n, t, -5, 5, [](auto& x) { return ceil(x); });
    case OpId::round: return unary(n, t, -5, 5, [](auto& x) { return round(x); });
    case OpId::trunc: return unary(n, t, -5, 5, [](auto& x) { return trunc(x); });
    case OpId::logical_not: return unary(n, t, -1, 1, [](auto& x) { return logical_not(x); });
    case OpId::tril:
      return {sample("tril [4, 5] k=1", {values({4, 5}, t, -3, 3, 7)}, [](auto& in) { return one(tril(in[0], 1)); }),
              sample("tril [2, 3, 3] k=-1", {values({2, 3, 3}, t, -3, 3, 8)},
                     [](auto& in) { return one(tril(in[0], -1)); })};
    case OpId::triu:
      return {sample("triu [4, 5]", {values({4, 5}, t, -3, 3, 9)}, [](auto& in) { return one(triu(in[0])); }),
              sample("triu [3, 2] k=-1", {values({3, 2}, t, -3, 3, 10)},
                     [](auto& in) { return one(triu(in[0], -1)); })};
    // ---- binary ----
    case OpId::add: return binary(n, t, -5, 5, [](auto& a, auto& b) { return a + b; }, -5, 5);
    case OpId::sub: return binary(n, t, -5, 5, [](auto& a, auto& b) { return a - b; }, -5, 5);
    case OpId::mul: return binary(n, t, -5, 5, [](auto& a, auto& b) { return a * b; }, -5, 5);
    case OpId::div: return binary(n, t, -5, 5, [](auto& a, auto& b) { return a / b; }, 1, 4);
    case OpId::pow:
      return binary(n, t, integral ? 0 : 0.5, 3, [](auto& a, auto& b) { return pow(a, b); }, 0, 3);
    case OpId::maximum: return binary(n, t, -5, 5, [](auto& a, auto& b) { return maximum(a, b); }, -5, 5);
    case OpId::minimum: return binary(n, t, -5, 5, [](auto& a, auto& b) { return minimum(a, b); }, -5, 5);
    case OpId::remainder:
      return binary(n, t, -7, 7, [](auto& a, auto& b) { return remainder(a, b); }, 1.3, 2.9);
    case OpId::floor_divide:
      return binary(n, t, -7, 7, [](auto& a, auto& b) { return floor_divide(a, b); }, 1.3, 2.9);
    case OpId::eq: return binary(n, t, -2, 2, [](auto& a, auto& b) { return eq(a, b); }, -2, 2);
    case OpId::ne: return binary(n, t, -2, 2, [](auto& a, auto& b) { return ne(a, b); }, -2, 2);
    case OpId::lt: return binary(n, t, -2, 2, [](auto& a, auto& b) { return lt(a, b); }, -2, 2);
    case OpId::le: return binary(n, t, -2, 2, [](auto& a, auto& b) { return le(a, b); }, -2, 2);
    case OpId::gt: return binary(n, t, -2, 2, [](auto& a, auto& b) { return gt(a, b); }, -2, 2);
    case OpId::ge: return binary(n, t, -2, 2, [](auto& a, auto& b) { return ge(a, b); }, -2, 2);
    case OpId::logical_and:
      return binary(n, t, -1, 1, [](auto& a, auto& b) { return logical_and(a, b); }, -1, 1);
    case OpId::logical_or:
      return binary(n, t, -1, 1, [](auto& a, auto& b) { return logical_or(a, b); }, -1, 1);
    // ---- other elementwise ----
    case OpId::where:
      return {sample("where [2, 3] broadcast",
                     {values({2, 1}, DType::bool_, 0, 1, 11), values({2, 3}, t, -5, 5, 12), values({3}, t, -5, 5, 13)},
                     [](auto& in) { return one(where(in[0], in[1], in[2])); })};
    case OpId::cast: {
      std::vector<OpSample> out;
      for (DType to : {DType::f32, DType::i64, DType::bf16, DType::bool_})
        out.push_back(sample(fmt::format("cast {} to {}", t, to), {values({3, 4}, t, -3, 3, 14)},
                             [to](auto& in) { return one(in[0].to(to)); }));
      return out;
    }
    case OpId::copy:
      return {sample("clone of a transposed view", {values({3, 4}, t, -3, 3, 15)},
                     [](auto& in) { return one(in[0].t().clone()); })};
    case OpId::random_uniform:
    case OpId::random_normal:
    case OpId::random_int:
      return random_draws(op, t);
    // ---- reductions ----
    case OpId::sum:
      return {sample("sum dims [0, 2]", {values({2, 3, 4}, t, -3, 3, 16)}, [](auto& in) { return one(sum(in[0], {0, 2})); }),
              sample("sum all", {values({3, 4}, t, -3, 3, 17)}, [](auto& in) { return one(sum(in[0])); })};
    case OpId::prod:
      return {sample("prod dim 1 keepdim", {values({3, 4}, t, integral ? 1 : 0.5, 2, 18)},
                     [](auto& in) { return one(prod(in[0], {1}, true)); })};
    case OpId::amax:
      return {sample("amax dim 0", {values({3, 4}, t, -9, 9, 19)}, [](auto& in) { return one(amax(in[0], {0})); })};
    case OpId::amin:
      return {sample("amin dims [0, 1] keepdim", {values({3, 4}, t, -9, 9, 20)},
                     [](auto& in) { return one(amin(in[0], {0, 1}, true)); })};
    case OpId::argmax:
      return {sample("argmax dim 1", {values({3, 5}, t, -9, 9, 21)}, [](auto& in) { return one(argmax(in[0], 1)); })};
    case OpId::argmin:
      return {sample("argmin dim 0 keepdim", {values({3, 5}, t, -9, 9, 22)},
                     [](auto& in) { return one(argmin(in[0], 0, true)); })};
    case OpId::max_dim:
      return {sample("max dim 1", {values({3, 5}, t, -99, 99, 23)}, [](auto& in) {
                auto [v, i] = max(in[0], 1);
                return std::vector<Tensor>{v, i};
              }),
              sample("max dim 0 keepdim", {values({4, 2}, t, -99, 99, 24)}, [](auto& in) {
                auto [v, i] = max(in[0], 0, true);
                return std::vector<Tensor>{v, i};
              })};
    case OpId::min_dim:
      return {sample("min dim -1", {values({3, 5}, t, -99, 99, 25)}, [](auto& in) {
        auto [v, i] = min(in[0], -1);
        return std::vector<Tensor>{v, i};
      })};
    // ---- ordering ----
    case OpId::sort:
      return {sample("sort dim -1", {values({3, 5}, t, -99, 99, 31)},
                     [](auto& in) {
                       auto [v, i] = sort(in[0]);
                       return std::vector<Tensor>{v, i};
                     }),
              sample("sort dim 0 descending", {values({4, 3}, t, -99, 99, 32)}, [](auto& in) {
                auto [v, i] = sort(in[0], 0, true);
                return std::vector<Tensor>{v, i};
              })};
    case OpId::topk:
      return {sample("topk 2 of dim -1", {values({3, 5}, t, -99, 99, 33)},
                     [](auto& in) {
                       auto [v, i] = topk(in[0], 2);
                       return std::vector<Tensor>{v, i};
                     }),
              sample("topk 3 smallest of dim 0", {values({4, 3}, t, -99, 99, 34)}, [](auto& in) {
                auto [v, i] = topk(in[0], 3, 0, false);
                return std::vector<Tensor>{v, i};
              })};
    // ---- scans and normalizations ----
    case OpId::cumsum:
      return {sample("cumsum dim 1", {values({3, 4}, t, -3, 3, 26)}, [](auto& in) { return one(cumsum(in[0], 1)); }),
              sample("cumsum dim 0 reverse", {values({3, 4}, t, -3, 3, 27)},
                     [](auto& in) { return one(cumsum(in[0], 0, true)); })};
    case OpId::softmax:
      return {sample("softmax dim 1", {values({3, 5}, t, -4, 4, 28)}, [](auto& in) { return one(softmax(in[0], 1)); }),
              sample("softmax dim 0", {values({4, 2}, t, -4, 4, 29)}, [](auto& in) { return one(softmax(in[0], 0)); })};
    case OpId::log_softmax:
      return {sample("log_softmax dim -1", {values({3, 5}, t, -4, 4, 30)},
                     [](auto& in) { return one(log_softmax(in[0], -1)); })};
    // ---- views ----
    case OpId::reshape:
      return {sample("reshape [2, 6] to [3, 4]", {values({2, 6}, t, -3, 3, 31)},
                     [](auto& in) { return one(in[0].reshape({3, -1})); }),
              sample("reshape of a transposed view", {values({2, 6}, t, -3, 3, 32)},
                     [](auto& in) { return one(in[0].t().reshape({4, 3})); })};
    case OpId::permute:
      return {sample("permute [2, 0, 1]", {values({2, 3, 4}, t, -3, 3, 33)},
                     [](auto& in) { return one(in[0].permute({2, 0, 1})); })};
    case OpId::expand:
      return {sample("expand [3, 1] to [2, 3, 4]", {values({3, 1}, t, -3, 3, 34)},
                     [](auto& in) { return one(in[0].expand({2, 3, 4})); })};
    case OpId::slice:
      return {sample("slice dim 1 [1, 5) step 2", {values({3, 6}, t, -3, 3, 35)},
                     [](auto& in) { return one(in[0].slice(1, 1, 5, 2)); }),
              sample("slice dim 0 [1, end)", {values({3, 6}, t, -3, 3, 36)},
                     [](auto& in) { return one(in[0].slice(0, 1, 3)); })};
    case OpId::detach:
      return {sample("x * detach(x)", {values({3, 4}, t, -3, 3, 37)},
                     [](auto& in) { return one(in[0] * in[0].detach()); })};
    // ---- indexing ----
    case OpId::gather:
      return {sample("gather dim 1", {values({3, 4}, t, -3, 3, 38), from_vector(std::vector<std::int64_t>{0, 3, 1, 1, 2, 0}, {3, 2})},
                     [](auto& in) { return one(gather(in[0], 1, in[1])); })};
    case OpId::index_select:
      return {sample("index_select dim 0 with repeats", {values({4, 3}, t, -3, 3, 39), from_vector(std::vector<std::int64_t>{2, 0, 2})},
                     [](auto& in) { return one(index_select(in[0], 0, in[1])); })};
    case OpId::scatter_add:
      return {sample("scatter_add dim 0",
                     {values({3, 2}, t, -3, 3, 40), from_vector(std::vector<std::int64_t>{0, 2, 0, 0}, {2, 2}), values({2, 2}, t, -3, 3, 41)},
                     [](auto& in) { return one(scatter_add(in[0], 0, in[1], in[2])); })};
    case OpId::index_add:
      return {sample("index_add dim 1",
                     {values({2, 4}, t, -3, 3, 42), from_vector(std::vector<std::int64_t>{3, 3, 0}), values({2, 3}, t, -3, 3, 43)},
                     [](auto& in) { return one(index_add(in[0], 1, in[1], in[2])); })};
    case OpId::index_copy:  // distinct entries: with duplicates the source's gradient is PyTorch's
      return {sample("index_copy dim 1",
                     {values({2, 4}, t, -3, 3, 52), from_vector(std::vector<std::int64_t>{3, 0, 2}),
                      values({2, 3}, t, -3, 3, 53)},
                     [](auto& in) { return one(index_copy(in[0], 1, in[1], in[2])); })};
    // ---- data movement ----
    case OpId::matmul:
      return {sample("matmul [2, 3] @ [3, 4]", {values({2, 3}, t, -2, 2, 44), values({3, 4}, t, -2, 2, 45)},
                     [](auto& in) { return one(matmul(in[0], in[1])); }),
              sample("matmul batched broadcast [2, 1, 2, 3] @ [3, 3, 2]",
                     {values({2, 1, 2, 3}, t, -2, 2, 46), values({3, 3, 2}, t, -2, 2, 47)},
                     [](auto& in) { return one(matmul(in[0], in[1])); })};
    case OpId::cat:
      return {sample("cat dim 1 of three", {values({2, 1}, t, -3, 3, 48), values({2, 3}, t, -3, 3, 49), values({2, 2}, t, -3, 3, 50)},
                     [](auto& in) { return one(cat({in[0], in[1], in[2]}, 1)); })};
    case OpId::pad:
      return {sample("pad last dims", {values({2, 3}, t, -3, 3, 51)},
                     [](auto& in) { return one(pad(in[0], {1, 2, 0, 1}, 0.5)); }),
              sample("pad cropping", {values({3, 5}, t, -3, 3, 52)},
                     [](auto& in) { return one(pad(in[0], {-1, 2, -1, -1})); })};
    case OpId::to_device:
      return {sample("to cuda and back", {values({3, 4}, t, -3, 3, 53)},
                     [](auto& in) { return one(in[0].to(Device::cuda()).to(Device::cpu()) * 2); })};
    // ---- attention ----
    case OpId::attention:
      return {sample("attention [2, 3, 4] x [2, 5, 4] -> dv 3, bool mask [2, 1, 5]",
                     {values({2, 3, 4}, t, -1, 1, 54), values({2, 5, 4}, t, -1, 1, 55), values({2, 5, 3}, t, -1, 1, 56)},
                     [](auto& in) {
                       // The mask from the inputs, so that no tensor is made on the host.
                       Tensor keep = unsqueeze(gt(sum(in[1], {-1}), sum(in[2], {-1})), -2);  // [2, 1, 5]
                       return one(scaled_dot_product_attention(in[0], in[1], in[2], keep));
                     }),
              sample("attention causal T 4 S 3, broadcast k/v batch, scale 0.7",
                     {values({2, 4, 3}, t, -1, 1, 58), values({1, 3, 3}, t, -1, 1, 59), values({1, 3, 2}, t, -1, 1, 60)},
                     [](auto& in) { return one(scaled_dot_product_attention(in[0], in[1], in[2], {}, true, 0.7)); })};
    case OpId::cached_attention:
      return {sample(
          "cached_attention q [2, 4, 2, 8] over caches [2, 2, 7, 8 / 5], grouped heads",
          {values({2, 4, 2, 8}, t, -1, 1, 64), values({2, 2, 7, 8}, t, -1, 1, 65),
           values({2, 2, 7, 5}, t, -1, 1, 66), values({2}, DType::i64, 2, 8, 67),
           values({2}, DType::i64, 0, 4, 68)},
          [](auto& in) { return one(cached_attention(in[0], in[1], in[2], in[3], in[4], 0.6)); })};
    case OpId::attention_backward:
      return {sample("attention_backward [2, 3, 4] x [2, 5, 4], additive mask [5]",
                     {values({2, 3, 4}, t, -1, 1, 61), values({2, 5, 4}, t, -1, 1, 62), values({2, 5, 3}, t, -1, 1, 63)},
                     [](auto& in) {
                       OpAttrs attrs;
                       attrs.scale = 0.5;
                       Tensor mask = sum(in[2], {0, 2});  // [5], from the inputs (no host tensor)
                       std::vector<Tensor> args{in[0], in[1], in[2], mask};
                       auto fwd = dispatch(OpId::attention, args, attrs);
                       Tensor dout = in[0].slice(2, 0, 3);
                       std::vector<Tensor> bwd{in[0], in[1], in[2], fwd[0], fwd[1], dout, mask};
                       return dispatch(OpId::attention_backward, bwd, attrs);
                     })};
  }
  return {};
}

}  // namespace kiln::test
