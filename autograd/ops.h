// kiln's differentiable op API. Each primitive goes through the one dispatch point
// (runtime/dispatch.h) and records autograd history; composites are written with primitives.
// Errors name the op and the offending shapes, dtypes or values.
#pragma once

#include <string_view>
#include <vector>

#include "autograd/grad_mode.h"
#include "runtime/factories.h"
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
Tensor sign(const Tensor& x);
Tensor logical_not(const Tensor& x);
Tensor cast(const Tensor& x, DType dtype);

// ---- binary (broadcasting; scalars follow the promotion rules in runtime/dtype.h) ----
#define KILN_DECLARE_BINARY(name)                    \
  Tensor name(const Tensor& a, const Tensor& b);     \
  Tensor name(const Tensor& a, double b);            \
  Tensor name(double a, const Tensor& b);
KILN_DECLARE_BINARY(add)
KILN_DECLARE_BINARY(sub)
KILN_DECLARE_BINARY(mul)
KILN_DECLARE_BINARY(div)
KILN_DECLARE_BINARY(pow)
KILN_DECLARE_BINARY(maximum)
KILN_DECLARE_BINARY(minimum)
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
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor where(const Tensor& cond, double a, const Tensor& b);

// ---- reductions (an empty dim list means every dim) ----
Tensor sum(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor prod(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, std::int64_t dim, bool keepdim = false);
// Variance with Bessel-style `correction` (1: unbiased, 0: population).
Tensor var(const Tensor& x, const Dims& dims = {}, double correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const Dims& dims = {}, double correction = 1, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim = false);
// Sums `x` down to a shape it was broadcast from.
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- views ----
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor permute(const Tensor& x, const Dims& dims);
Tensor transpose(const Tensor& x, std::int64_t dim0, std::int64_t dim1);
Tensor expand(const Tensor& x, const Shape& shape);
// Python-style range: negative start/end count from the end and are clamped to the dim.
Tensor slice(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t end,
             std::int64_t step = 1);
Tensor select(const Tensor& x, std::int64_t dim, std::int64_t index);
Tensor squeeze(const Tensor& x);
Tensor squeeze(const Tensor& x, std::int64_t dim);
Tensor unsqueeze(const Tensor& x, std::int64_t dim);
Tensor flatten(const Tensor& x, std::int64_t start_dim = 0, std::int64_t end_dim = -1);

// ---- indexing and joining ----
Tensor gather(const Tensor& x, std::int64_t dim, const Tensor& index);
Tensor index_select(const Tensor& x, std::int64_t dim, const Tensor& index);
// Rows of `weight` ([num, dim]) picked by `indices` of any shape: result indices.shape + [dim].
Tensor embedding(const Tensor& weight, const Tensor& indices);
Tensor scatter_add(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src);
Tensor index_add(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& source);
Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim = 0);
// Constant padding; `pads` holds (before, after) pairs starting from the last dim.
Tensor pad(const Tensor& x, const Dims& pads, double value = 0.0);

// ---- linear algebra ----
// PyTorch's matmul: 1-D operands are promoted and squeezed back, batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
// x @ weight^T + bias, with weight [out_features, in_features].
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// ---- composites ----
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
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);

// ---- comparison of whole tensors (no autograd) ----
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8,
              bool equal_nan = false);

// ---- operators ----
inline Tensor operator-(const Tensor& x) { return neg(x); }
#define KILN_BINARY_OPERATOR(op, fn)                                             \
  inline Tensor operator op(const Tensor& a, const Tensor& b) { return fn(a, b); } \
  inline Tensor operator op(const Tensor& a, double b) { return fn(a, b); }        \
  inline Tensor operator op(double a, const Tensor& b) { return fn(a, b); }
KILN_BINARY_OPERATOR(+, add)
KILN_BINARY_OPERATOR(-, sub)
KILN_BINARY_OPERATOR(*, mul)
KILN_BINARY_OPERATOR(/, div)
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
