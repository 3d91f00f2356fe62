// Composite ops, written once from primitives (the form the fuser consumes). softmax and
// log_softmax register their cheaper closed-form backward.
#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "runtime/trace_hooks.h"

namespace kiln {

namespace {

// The number of elements reduced over `dims`, minus `correction`, as a divisor. While tracing it
// is computed by the graph (a sum over an expanded one), so it follows dynamic sizes instead of
// baking in the traced ones.
Tensor reduced_count(const Tensor& x, const Dims& dims, bool keepdim, double correction = 0) {
  KILN_OP_SCOPE;
  if (x.impl().trace_value >= 0) {
    Tensor count = sum(expand(scalar_tensor(1.0, x.dtype()), x.shape()), dims, keepdim);
    return correction == 0 ? count : maximum(count - correction, 0.0);
  }
  std::int64_t n = 1;
  for (auto d : normalize_dims(dims, x.dim(), "reduce")) n *= x.shape()[d];
  return scalar_tensor(std::max(static_cast<double>(n) - correction, 0.0), x.dtype());
}

void check_floating(const Tensor& x, const char* op) {
  KILN_CHECK_AS(DTypeError, is_floating(x.dtype()),
                "{}: input must have a floating dtype, got {} (shape {}); cast it first", op,
                x.dtype(), shape_str(x.shape()));
}

}  // namespace

Tensor mean(const Tensor& x, const Dims& dims, bool keepdim) {
  KILN_OP_SCOPE;
  check_floating(x, "mean");
  return sum(x, dims, keepdim) / reduced_count(x, dims, keepdim);
}

Tensor var(const Tensor& x, const Dims& dims, double correction, bool keepdim) {
  KILN_OP_SCOPE;
  check_floating(x, "var");
  Tensor centered = x - mean(x, dims, /*keepdim=*/true);
  return sum(centered * centered, dims, keepdim) / reduced_count(x, dims, keepdim, correction);
}

Tensor std(const Tensor& x, const Dims& dims, double correction, bool keepdim) {
  KILN_OP_SCOPE;
  return sqrt(var(x, dims, correction, keepdim));
}

Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim) {
  KILN_OP_SCOPE;
  check_floating(x, "logsumexp");
  // Shifting by the (detached) max keeps exp() finite; the result does not depend on the shift.
  Tensor m = amax(x.detach(), dims, /*keepdim=*/true);
  m = where(logical_not(eq(abs(m), INFINITY)), m, zeros_like(m));
  Tensor out = log(sum(exp(x - m), dims, /*keepdim=*/true)) + m;
  if (!keepdim)
    for (auto d : [&] {
           auto nd = normalize_dims(dims, x.dim(), "logsumexp");
           return Dims(nd.rbegin(), nd.rend());
         }())
      out = squeeze(out, d);
  return out;
}

Tensor softmax(const Tensor& x_in, std::int64_t dim) {
  KILN_OP_SCOPE;
  Tensor x = is_floating(x_in.dtype()) ? x_in : x_in.to(DType::f32);
  dim = normalize_dim(dim, x.dim(), "softmax");
  Tensor y;
  {
    NoGradGuard no_grad;
    Tensor e = exp(x - amax(x, {dim}, true));
    y = e / sum(e, {dim}, true);
  }
  // The output is saved detached (capturing y itself would make it own its own grad_fn, a
  // cycle never freed) and version-checked like a primitive's saved inputs.
  autograd::SavedTensor saved(y.detach());
  return autograd::record_function(y, "SoftmaxBackward", {x}, [x, saved, dim](const Tensor& g) {
    Tensor out = saved.unpack("SoftmaxBackward");
    // Under create_graph, recompute y with history so second derivatives stay exact.
    Tensor yy = grad_enabled() ? softmax(x, dim) : out;
    return std::vector<Tensor>{yy * (g - sum(g * yy, {dim}, true))};
  });
}

Tensor log_softmax(const Tensor& x_in, std::int64_t dim) {
  KILN_OP_SCOPE;
  Tensor x = is_floating(x_in.dtype()) ? x_in : x_in.to(DType::f32);
  dim = normalize_dim(dim, x.dim(), "log_softmax");
  Tensor y;
  {
    NoGradGuard no_grad;
    Tensor shifted = x - amax(x, {dim}, true);
    y = shifted - log(sum(exp(shifted), {dim}, true));
  }
  autograd::SavedTensor saved(y.detach());  // as in softmax
  return autograd::record_function(y, "LogSoftmaxBackward", {x}, [x, saved, dim](const Tensor& g) {
    Tensor out = saved.unpack("LogSoftmaxBackward");
    Tensor yy = grad_enabled() ? log_softmax(x, dim) : out;
    return std::vector<Tensor>{g - exp(yy) * sum(g, {dim}, true)};
  });
}

namespace {

Dims trailing_dims(const Tensor& x, const Shape& normalized_shape, const char* op) {
  KILN_OP_SCOPE;
  auto k = static_cast<std::int64_t>(normalized_shape.size());
  bool ok = k >= 1 && k <= x.dim() &&
            Shape(x.shape().end() - k, x.shape().end()) == normalized_shape;
  KILN_CHECK_AS(ShapeError, ok, "{}: normalized_shape {} does not match the trailing dims of {}",
                op, shape_str(normalized_shape), shape_str(x.shape()));
  Dims dims;
  for (std::int64_t d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

void check_affine(const Tensor& p, const Shape& normalized_shape, const char* op,
                  const char* what) {
  if (p.defined())
    KILN_CHECK_AS(ShapeError, p.shape() == normalized_shape, "{}: {} has shape {}, expected {}",
                  op, what, shape_str(p.shape()), shape_str(normalized_shape));
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  KILN_OP_SCOPE;
  check_floating(x, "layer_norm");
  Dims dims = trailing_dims(x, normalized_shape, "layer_norm");
  check_affine(weight, normalized_shape, "layer_norm", "weight");
  check_affine(bias, normalized_shape, "layer_norm", "bias");
  Tensor centered = x - mean(x, dims, true);
  Tensor y = centered * rsqrt(mean(centered * centered, dims, true) + eps);
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return y;
}

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                double eps) {
  KILN_OP_SCOPE;
  check_floating(x, "rms_norm");
  Dims dims = trailing_dims(x, normalized_shape, "rms_norm");
  check_affine(weight, normalized_shape, "rms_norm", "weight");
  Tensor y = x * rsqrt(mean(x * x, dims, true) + eps);
  return weight.defined() ? y * weight : y;
}

namespace {
Tensor reduce_loss(const Tensor& loss, Reduction reduction) {
  KILN_OP_SCOPE;
  switch (reduction) {
    case Reduction::none: return loss;
    case Reduction::sum: return sum(loss);
    case Reduction::mean: return mean(loss);
  }
  return loss;
}
}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, std::int64_t ignore_index,
                     Reduction reduction) {
  KILN_OP_SCOPE;
  KILN_CHECK_AS(DTypeError, is_integral(target.dtype()),
                "cross_entropy: target must hold class indices (i64 or i32), got {}",
                target.dtype());
  bool batched = logits.dim() == 2;
  KILN_CHECK_AS(ShapeError,
                (batched && target.dim() == 1 && target.shape()[0] == logits.shape()[0]) ||
                    (logits.dim() == 1 && target.dim() == 0),
                "cross_entropy: logits {} and target {} do not fit ([N, C] with [N], or [C] "
                "with [])",
                shape_str(logits.shape()), shape_str(target.shape()));
  Tensor lsm = log_softmax(batched ? logits : unsqueeze(logits, 0), 1);
  Tensor t = batched ? target : unsqueeze(target, 0);
  Tensor valid = ne(t, static_cast<double>(ignore_index));
  Tensor safe = where(valid, t, zeros_like(t));
  Tensor picked;
  try {
    picked = squeeze(gather(lsm, 1, unsqueeze(safe, 1)), 1);
  } catch (const IndexError& e) {
    throw IndexError(fmt::format("cross_entropy: target out of range for {} classes ({})",
                                 lsm.shape()[1], e.what()));
  }
  Tensor nll = where(valid, neg(picked), zeros_like(picked));
  if (!batched) nll = squeeze(nll, 0);
  if (reduction == Reduction::mean) return sum(nll) / sum(cast(valid, nll.dtype()));
  return reduce_loss(nll, reduction);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  KILN_OP_SCOPE;
  KILN_CHECK_AS(ShapeError, input.shape() == target.shape(),
                "mse_loss: input shape {} and target shape {} differ", shape_str(input.shape()),
                shape_str(target.shape()));
  Tensor d = input - target;
  return reduce_loss(d * d, reduction);
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  KILN_OP_SCOPE;
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability must be in [0, 1], got {}", p);
  check_floating(x, "dropout");
  if (!training || p == 0.0) return x;
  if (p == 1.0) return x * 0.0;
  Tensor keep = ge(rand(x.shape(), x.dtype(), gen), p);
  return x * cast(keep, x.dtype()) * (1.0 / (1.0 - p));
}

}  // namespace kiln
