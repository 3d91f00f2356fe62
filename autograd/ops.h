// kiln's differentiable op API. Each primitive goes through the one dispatch point
// (runtime/dispatch.h) and records autograd history; composites are written with primitives.
// Errors name the op and the offending shapes, dtypes or values.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "runtime/factories.h"
#include "runtime/grad_mode.h"
#include "runtime/linear_epilogue.h"
#include "runtime/op.h"
#include "runtime/random.h"
#include "runtime/tensor.h"

namespace kiln {

using Dims = std::vector<std::int64_t>;

// ---- unary ----
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
enum class GeluApproximation { none, tanh };
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::none);
Tensor silu(const Tensor& x);
Tensor erf(const Tensor& x);
// log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold (as PyTorch).
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor square(const Tensor& x);
// Rounding (integers pass through); their gradient is zero, as is sign's.
Tensor sign(const Tensor& x);
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor round(const Tensor& x);  // ties to even
Tensor trunc(const Tensor& x);
Tensor logical_not(const Tensor& x);
Tensor cast(const Tensor& x, DType dtype);
// Bounds x to [min, max]; either bound may be absent. The gradient passes where
// min <= x <= max (both ends included), as in PyTorch; NaN in x or in a bound gives NaN.
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max = {});
Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max);  // undefined: no bound
Tensor clamp_min(const Tensor& x, Scalar min);
Tensor clamp_max(const Tensor& x, Scalar max);
// The lower / upper triangle of the last two dims (diagonal > 0 moves above the main one).
Tensor tril(const Tensor& x, std::int64_t diagonal = 0);
Tensor triu(const Tensor& x, std::int64_t diagonal = 0);

// ---- binary (broadcasting; numbers follow the promotion rules in runtime/dtype.h) ----
#define KILN_DECLARE_BINARY(name)                \
  Tensor name(const Tensor& a, const Tensor& b); \
  Tensor name(const Tensor& a, Scalar b);        \
  Tensor name(Scalar a, const Tensor& b);
KILN_DECLARE_BINARY(add)
KILN_DECLARE_BINARY(sub)
KILN_DECLARE_BINARY(mul)
KILN_DECLARE_BINARY(div)
KILN_DECLARE_BINARY(pow)
KILN_DECLARE_BINARY(maximum)
KILN_DECLARE_BINARY(minimum)
KILN_DECLARE_BINARY(remainder)     // Python's %: the sign of the divisor
KILN_DECLARE_BINARY(floor_divide)  // rounds toward negative infinity
KILN_DECLARE_BINARY(eq)
KILN_DECLARE_BINARY(ne)
KILN_DECLARE_BINARY(lt)
KILN_DECLARE_BINARY(le)
KILN_DECLARE_BINARY(gt)
KILN_DECLARE_BINARY(ge)
#undef KILN_DECLARE_BINARY
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, Scalar b);
Tensor where(const Tensor& cond, Scalar a, const Tensor& b);
// `value` where `mask` is true (mask broadcasts to x); value is a number or a 0-d tensor.
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value);

// ---- reductions (an empty dim list means every dim) ----
Tensor sum(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor prod(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, std::int64_t dim, bool keepdim = false);
// The extreme along `dim` and where it is (i64), as PyTorch's max(dim): NaN wins, ties take
// the first; the gradient goes to the selected element only. Destructures:
// `auto [values, indices] = max(x, 1);`.
struct ValuesIndices {
  Tensor values;
  Tensor indices;
};
ValuesIndices max(const Tensor& x, std::int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, std::int64_t dim, bool keepdim = false);
// ---- ordering along one dim: equal values keep their index order (PyTorch's stable sort), and
// NaN counts as the largest value; the gradient of the values flows to the elements they came
// from ----
// Values in order and where each came from (i64): `auto [values, indices] = sort(x);`.
ValuesIndices sort(const Tensor& x, std::int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor& x, std::int64_t dim = -1, bool descending = false);
// The k largest (smallest unless `largest`) values along dim, in order, and their indices.
ValuesIndices topk(const Tensor& x, std::int64_t k, std::int64_t dim = -1, bool largest = true);
// Running sum along `dim` (from the end when `reverse`); integers accumulate in i64.
Tensor cumsum(const Tensor& x, std::int64_t dim, bool reverse = false);
// Variance with Bessel-style `correction` (1: unbiased, 0: population).
Tensor var(const Tensor& x, const Dims& dims = {}, double correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const Dims& dims = {}, double correction = 1, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim = false);
// Sums `x` down to a shape it was broadcast from.
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- views (shapes may hold one -1, and symbolic sizes from size()) ----
Tensor reshape(const Tensor& x, const SymShape& shape);
Tensor permute(const Tensor& x, const Dims& dims);
Tensor transpose(const Tensor& x, std::int64_t dim0, std::int64_t dim1);
Tensor expand(const Tensor& x, const SymShape& shape);
// Python-style range: negative start/end count from the end and are clamped to the dim.
Tensor slice(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t end,
             std::int64_t step = 1);
Tensor select(const Tensor& x, std::int64_t dim, std::int64_t index);
Tensor squeeze(const Tensor& x);
Tensor squeeze(const Tensor& x, std::int64_t dim);
Tensor unsqueeze(const Tensor& x, std::int64_t dim);
Tensor flatten(const Tensor& x, std::int64_t start_dim = 0, std::int64_t end_dim = -1);
// Splits dim `dim` into `sizes` (one of them may be -1).
Tensor unflatten(const Tensor& x, std::int64_t dim, const SymShape& sizes);

// ---- indexing and joining ----
Tensor gather(const Tensor& x, std::int64_t dim, const Tensor& index);
Tensor index_select(const Tensor& x, std::int64_t dim, const Tensor& index);
// Rows of `weight` ([num, dim]) picked by `indices` of any shape: result indices.shape + [dim].
Tensor embedding(const Tensor& weight, const Tensor& indices);
Tensor scatter_add(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src);
Tensor index_add(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& source);
// torch.index_copy: self with its slices at `index` along `dim` replaced by those of `source`
// (index 1-D integer, source shaped as self with len(index) along dim, of self's dtype).
Tensor index_copy(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& source);
// index_copy's checks (the errors it raises), returning `dim` normalized: what
// Tensor::index_copy_ checks before writing the slices in place.
std::int64_t check_index_copy(const Tensor& self, std::int64_t dim, const Tensor& index,
                              const Tensor& source);
// torch.index_put: self with self[indices] = values (PyTorch's advanced indexing). `indices`
// holds up to self.dim() i64/i32 tensors, which broadcast together, one per leading dim (an
// undefined Tensor: that dim in full, `:`), or a single bool mask of self's leading shape.
// values (self's dtype) broadcast to the indexed shape. accumulate sums into self, duplicates
// included; otherwise a position indexed twice gets the mean of its values. Negative indices
// count from the end; one out of range is an IndexError (in a compiled function, or on CUDA, at
// the next sync, from index_add). See docs/features.md.
Tensor index_put(const Tensor& self, const std::vector<Tensor>& indices, const Tensor& values,
                 bool accumulate = false);
Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim = 0);
// Constant padding; `pads` holds (before, after) pairs starting from the last dim. Negative
// amounts crop.
Tensor pad(const Tensor& x, const Dims& pads, double value = 0.0);

// ---- linear algebra ----
// PyTorch's matmul: 1-D operands are promoted and squeezed back, batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
// Batched matmul of [B, n, m] and [B, m, p] (no broadcasting, as torch.bmm).
Tensor bmm(const Tensor& a, const Tensor& b);
// act(x @ weight^T + bias), with weight [out_features, in_features] and bias [out_features].
// On CUDA tensors, eagerly, ONE cuBLASLt call with the matching epilogue and a backward of
// GEMMs with the bias gradient out of one of them (autograd/fused_linear.h); elsewhere, while
// tracing, or where cuBLASLt's rules refuse the operands, the primitives matmul, add, relu /
// gelu(x, tanh).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              Activation act = Activation::none);
// Weight-only int8 (gpt-fast's WeightOnlyInt8Linear): act((x @ cast(weight, x's dtype)^T) *
// scale + bias), weight i8 [out, in], scale [out] (floating, one symmetric scale per output
// channel: nn::Linear::quantize_int8). The scale commutes with the product, so a compiled
// decode step reads the int8 weight in its GEMM and applies the scale in the epilogue.
Tensor linear_int8(const Tensor& x, const Tensor& weight, const Tensor& scale,
                   const Tensor& bias = {}, Activation act = Activation::none);
// The transformer's feed-forward block linear(linear(x, w1, b1, act), w2, b2) (Apex's
// FusedDenseGeluDense). On CUDA eagerly: two library calls forward (the first saving what the
// activation's derivative reads), four backward (the activation's derivative and both bias
// gradients inside the GEMMs), no generated kernels.
Tensor feed_forward(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                    const Tensor& b2, Activation act = Activation::gelu_tanh);
// Einstein summation over one or more operands: "ij,jk->ik", "bhqd,bhkd->bhqk", "...ij->...ji",
// "ii->i" is not supported (no diagonals). Without "->", the output takes the indices that
// appear once, in alphabetical order. Lowered to permute, reshape, sum and matmul.
Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands);
// softmax(q kᵀ·scale + mask) v, as PyTorch's scaled_dot_product_attention: q [..., T, d],
// k [..., S, d], v [..., S, dv] (batch dims broadcast) give [..., T, dv]. `mask` is bool (true
// attends) or floating (added to the scores), broadcastable to [..., T, S]; `causal` lets query
// i attend keys 0..i (top-left aligned when T != S); `scale` defaults to 1/sqrt(d). A fully
// masked row gives 0 and a zero gradient (PyTorch's math path gives NaN there, its flash path
// 0). One op (`attention`) with its own backward op: on CUDA a fused kernel where one takes the
// call, else primitive ops (the reason on KILN_LOG=fusion). `dropout_p` drops probabilities as
// dropout(softmax(..), dropout_p) would, drawing the same numbers from `gen` (the default
// generator when null); the fused kernels regenerate them in the backward instead of saving a
// mask.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask = {}, bool causal = false,
                                    std::optional<double> scale = std::nullopt,
                                    double dropout_p = 0.0, Generator* gen = nullptr);
// Attention of new queries over a KV cache's live rows, as flash-attn's flash_attn_with_kvcache
// reads them (the cache written first, with index_copy_): q [B, H, T, d], k_cache [B, Hkv, S, d],
// v_cache [B, Hkv, S, dv], Hkv dividing H. `lengths` (i64 [B]) counts each sequence's rows written
// so far, the T new ones included: query t sits at position lengths[b] - T + t and attends rows
// starts[b] up to its position (`starts`, i64 [B], the first live row past a left padding; zeros
// when undefined). Only those rows are read and no mask is. A query before its sequence's start
// (a padding query) gives 0. On CUDA split-KV kernels that fill the GPU from one sequence. No
// derivative: an input that requires grad under grad mode is refused.
Tensor cached_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                        const Tensor& lengths, const Tensor& starts = {},
                        std::optional<double> scale = std::nullopt);

// ---- normalizations and losses (f16/bf16 compute in f32 and round once) ----
Tensor softmax(const Tensor& x, std::int64_t dim);
Tensor log_softmax(const Tensor& x, std::int64_t dim);
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                double eps = 1e-6);
enum class Reduction { none, mean, sum };
// `logits` [N, C] (or [C]), integer `target` [N] (or []); targets equal to `ignore_index` do
// not count, and the mean is over the counted ones.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, std::int64_t ignore_index = -100,
                     Reduction reduction = Reduction::mean);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// Zeroes elements with probability p and scales the rest by 1/(1-p); identity when !training.
// The mask is drawn on x's device (uniforms >= p; f32 ones for f16/bf16 x).
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);
// 1 with probability p[i], else 0, in p's dtype and on its device (PyTorch's bernoulli: a
// uniform < p[i], drawn in f32 for f16/bf16 p). Probabilities outside [0, 1] (or NaN) are an
// error, which reads two numbers back from a CUDA tensor. No gradient.
Tensor bernoulli(const Tensor& p, Generator* gen = nullptr);
// 1 with probability p, else 0, with x's shape, dtype and device.
Tensor bernoulli(const Tensor& x, double p, Generator* gen = nullptr);

// ---- comparison of whole tensors (no autograd) ----
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8,
              bool equal_nan = false);

// ---- operators ----
inline Tensor operator-(const Tensor& x) { return neg(x); }
#define KILN_BINARY_OPERATOR(op, fn)                                             \
  inline Tensor operator op(const Tensor& a, const Tensor& b) { return fn(a, b); } \
  inline Tensor operator op(const Tensor& a, Scalar b) { return fn(a, b); }        \
  inline Tensor operator op(Scalar a, const Tensor& b) { return fn(a, b); }
KILN_BINARY_OPERATOR(+, add)
KILN_BINARY_OPERATOR(-, sub)
KILN_BINARY_OPERATOR(*, mul)
KILN_BINARY_OPERATOR(/, div)
KILN_BINARY_OPERATOR(%, remainder)
KILN_BINARY_OPERATOR(<, lt)
KILN_BINARY_OPERATOR(<=, le)
KILN_BINARY_OPERATOR(>, gt)
KILN_BINARY_OPERATOR(>=, ge)
KILN_BINARY_OPERATOR(==, eq)
KILN_BINARY_OPERATOR(!=, ne)
#undef KILN_BINARY_OPERATOR
inline Tensor operator&&(const Tensor& a, const Tensor& b) { return logical_and(a, b); }
inline Tensor operator||(const Tensor& a, const Tensor& b) { return logical_or(a, b); }
inline Tensor operator!(const Tensor& x) { return logical_not(x); }

}  // namespace kiln
