// Composite ops, written once from primitives: tracing records what they decompose into, which
// is the form the fuser consumes. Normalizations and losses on f16/bf16 compute in f32 and
// round once at the end.
#include "autograd/composites.h"

#include <cmath>

#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "runtime/trace_hooks.h"

namespace kiln {

namespace {

// The number of elements reduced over `dims`, minus `correction`, as a divisor. While tracing it
// is computed by the graph (a sum over an expanded one), so it follows dynamic sizes instead of
// baking in the traced ones.
Tensor reduced_count(const Tensor& x, const Dims& dims, bool keepdim, double correction = 0) {
  KILN_OP_SCOPE;
  // A 0-dim count divides every row alike (whatever keepdim) and reads as a number next to
  // tensors of any device.
  SymShape reduced;
  SymShape sizes = x.sym_shape();
  for (auto d : normalize_dims(dims, x.dim(), "reduce")) reduced.push_back(sizes[d]);
  if (x.impl().trace_value >= 0 && !reduced.is_static()) {
    // Symbolic while tracing: computed in the graph, on the device of the rows it divides.
    Tensor count = sum(expand(scalar_tensor(1, x.dtype()).to(x.device()), reduced));
    return correction == 0 ? count : maximum(count - correction, 0);
  }
  std::int64_t n = 1;
  for (auto s : reduced.traced_values()) n *= s;
  (void)keepdim;
  return scalar_tensor(std::max(static_cast<double>(n) - correction, 0.0), x.dtype());
}

void check_floating(const Tensor& x, const char* op) {
  KILN_CHECK_AS(DTypeError, is_floating(x.dtype()),
                "{}: input must have a floating dtype, got {} (shape {}); cast it first", op,
                x.dtype(), shape_str(x.impl().shape));
}

// f16/bf16 widened to f32 for a composite's arithmetic; other dtypes as they are.
Tensor widened(const Tensor& x) {
  return x.defined() ? cast(x, compute_dtype(x.dtype())) : x;
}

}  // namespace

const std::vector<CompositeInfo>& all_composites() {
  using enum OpId;
  static const std::vector<CompositeInfo> table = {
      {"mean", {sum, expand, div}},
      {"var", {sum, expand, sub, mul, div, maximum}},
      {"std", {sum, expand, sub, mul, div, maximum, eq, where, sqrt}},
      {"logsumexp", {detach, amax, abs, eq, where, sub, exp, sum, log, add, reshape, cast}},
      {"layer_norm", {cast, sum, expand, div, sub, mul, add, rsqrt}},
      {"rms_norm", {cast, mul, sum, expand, div, add, rsqrt}},
      {"cross_entropy", {cast, log_softmax, ne, where, gather, reshape, neg, sum, div}},
      {"mse_loss", {sub, mul, sum, expand, div}},
      {"linear", {permute, matmul, add}},
      {"embedding", {reshape, index_select}},
      {"stack", {reshape, cat}},
      {"select", {slice, reshape}},
      {"square", {mul}},
      {"leaky_relu", {gt, mul, where, cast}},
      {"clamp", {lt, gt, where, eq, ne, logical_or}},
      {"masked_fill", {where}},
      {"bmm", {matmul}},
      {"einsum", {permute, reshape, sum, matmul, expand}},
  };
  return table;
}

// Under autocast, the ops below recall themselves once: inputs cast as autograd/autocast.h lists
// them (or left as they are: mean, var, std), the body with autocast off.

Tensor mean(const Tensor& x, const Dims& dims, bool keepdim) {
  KILN_OP_SCOPE;
  if (autocast_state().enabled) {
    autograd::AutocastOff off;
    return mean(x, dims, keepdim);
  }
  check_floating(x, "mean");
  return sum(x, dims, keepdim) / reduced_count(x, dims, keepdim);
}

Tensor var(const Tensor& x, const Dims& dims, double correction, bool keepdim) {
  KILN_OP_SCOPE;
  if (autocast_state().enabled) {
    autograd::AutocastOff off;
    return var(x, dims, correction, keepdim);
  }
  check_floating(x, "var");
  Tensor centered = x - mean(x, dims, /*keepdim=*/true);
  return sum(centered * centered, dims, keepdim) / reduced_count(x, dims, keepdim, correction);
}

Tensor std(const Tensor& x, const Dims& dims, double correction, bool keepdim) {
  KILN_OP_SCOPE;
  if (autocast_state().enabled) {
    autograd::AutocastOff off;
    return std(x, dims, correction, keepdim);
  }
  Tensor v = var(x, dims, correction, keepdim);
  // sqrt'(0) is infinite; PyTorch defines std's gradient as 0 there (a constant slice). Taking
  // sqrt of 1 where v == 0 keeps the unused branch's gradient finite, so 0 * it stays 0.
  Tensor zero = eq(v, 0);
  return where(zero, 0, sqrt(where(zero, 1, v)));
}

Tensor logsumexp(const Tensor& x_in, const Dims& dims, bool keepdim) {
  KILN_OP_SCOPE;
  if (autocast_state().enabled) {
    Tensor x = autograd::autocast_input(AutocastPolicy::f32, x_in);
    autograd::AutocastOff off;
    return logsumexp(x, dims, keepdim);
  }
  check_floating(x_in, "logsumexp");
  Tensor x = widened(x_in);
  auto reduced = normalize_dims(dims, x.dim(), "logsumexp");
  bool empty = false;
  for (auto d : reduced) empty = empty || x.impl().shape[d] == 0;
  if (empty) return cast(log(sum(exp(x), dims, keepdim)), x_in.dtype());  // log(0) = -inf
  // Shifting by the (detached) max keeps exp() finite; the result does not depend on the shift.
  Tensor m = amax(x.detach(), dims, /*keepdim=*/true);
  m = where(eq(abs(m), INFINITY), 0, m);
  Tensor out = log(sum(exp(x - m), dims, /*keepdim=*/true)) + m;
  if (!keepdim)
    for (auto it = reduced.rbegin(); it != reduced.rend(); ++it) out = squeeze(out, *it);
  return cast(out, x_in.dtype());
}

namespace {

Dims trailing_dims(const Tensor& x, const Shape& normalized_shape, const char* op) {
  KILN_OP_SCOPE;
  auto k = static_cast<std::int64_t>(normalized_shape.size());
  const Shape& shape = x.impl().shape;
  bool ok = k >= 1 && k <= x.dim() && Shape(shape.end() - k, shape.end()) == normalized_shape;
  KILN_CHECK_AS(ShapeError, ok, "{}: normalized_shape {} does not match the trailing dims of {}",
                op, shape_str(normalized_shape), shape_str(shape));
  Dims dims;
  for (std::int64_t d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

void check_affine(const Tensor& p, const Shape& normalized_shape, const char* op,
                  const char* what) {
  if (p.defined())
    KILN_CHECK_AS(ShapeError, p.impl().shape == normalized_shape,
                  "{}: {} has shape {}, expected {}", op, what, shape_str(p.impl().shape),
                  shape_str(normalized_shape));
}

}  // namespace

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  KILN_OP_SCOPE;
  if (autocast_state().enabled) {
    auto in = autograd::autocast_inputs(AutocastPolicy::f32, {x_in, weight, bias});
    autograd::AutocastOff off;
    return layer_norm(in[0], normalized_shape, in[1], in[2], eps);
  }
  check_floating(x_in, "layer_norm");
  Dims dims = trailing_dims(x_in, normalized_shape, "layer_norm");
  check_affine(weight, normalized_shape, "layer_norm", "weight");
  check_affine(bias, normalized_shape, "layer_norm", "bias");
  Tensor x = widened(x_in);
  Tensor centered = x - mean(x, dims, true);
  Tensor y = centered * rsqrt(mean(centered * centered, dims, true) + eps);
  if (weight.defined()) y = y * widened(weight);
  if (bias.defined()) y = y + widened(bias);
  return cast(y, x_in.dtype());
}

Tensor rms_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight,
                double eps) {
  KILN_OP_SCOPE;
  if (autocast_state().enabled) {
    auto in = autograd::autocast_inputs(AutocastPolicy::f32, {x_in, weight});
    autograd::AutocastOff off;
    return rms_norm(in[0], normalized_shape, in[1], eps);
  }
  check_floating(x_in, "rms_norm");
  Dims dims = trailing_dims(x_in, normalized_shape, "rms_norm");
  check_affine(weight, normalized_shape, "rms_norm", "weight");
  Tensor x = widened(x_in);
  Tensor y = x * rsqrt(mean(x * x, dims, true) + eps);
  if (weight.defined()) y = y * widened(weight);
  return cast(y, x_in.dtype());
}

namespace {
Tensor reduce_loss(const Tensor& loss, Reduction reduction) {
  KILN_OP_SCOPE;
  switch (reduction) {
    case Reduction::none:
      return loss;
    case Reduction::sum:
      return sum(loss);
    case Reduction::mean:
      return mean(loss);
  }
  return loss;
}
}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, std::int64_t ignore_index,
                     Reduction reduction) {
  KILN_OP_SCOPE;
  if (autocast_state().enabled) {
    Tensor wide = autograd::autocast_input(AutocastPolicy::f32, logits);
    autograd::AutocastOff off;
    return cross_entropy(wide, target, ignore_index, reduction);
  }
  KILN_CHECK_AS(DTypeError, is_integral(target.dtype()),
                "cross_entropy: target must hold class indices (i64 or i32), got {}",
                target.dtype());
  check_floating(logits, "cross_entropy");
  const Shape &ls = logits.impl().shape, &ts = target.impl().shape;
  bool batched = logits.dim() == 2;
  KILN_CHECK_AS(
      ShapeError,
      (batched && target.dim() == 1 && ts[0] == ls[0]) || (logits.dim() == 1 && target.dim() == 0),
      "cross_entropy: logits {} and target {} do not fit ([N, C] with [N], or [C] "
      "with [])",
      shape_str(ls), shape_str(ts));
  Tensor wide = widened(logits);
  Tensor lsm = log_softmax(batched ? wide : unsqueeze(wide, 0), 1);
  Tensor t = batched ? target : unsqueeze(target, 0);
  Tensor valid = ne(t, ignore_index);
  Tensor safe = where(valid, t, 0);
  Tensor picked;
  try {
    picked = squeeze(gather(lsm, 1, unsqueeze(safe, 1)), 1);
  } catch (const IndexError& e) {
    throw IndexError(fmt::format("cross_entropy: target out of range for {} classes ({})",
                                 lsm.impl().shape[1], e.what()));
  }
  Tensor nll = where(valid, neg(picked), 0);
  if (!batched) nll = squeeze(nll, 0);
  Tensor loss = reduction == Reduction::mean ? sum(nll) / sum(cast(valid, nll.dtype()))
                                             : reduce_loss(nll, reduction);
  return cast(loss, logits.dtype());
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  KILN_OP_SCOPE;
  if (autocast_state().enabled) {
    auto in = autograd::autocast_inputs(AutocastPolicy::f32, {input, target});
    autograd::AutocastOff off;
    return mse_loss(in[0], in[1], reduction);
  }
  KILN_CHECK_AS(ShapeError, input.impl().shape == target.impl().shape,
                "mse_loss: input shape {} and target shape {} differ",
                shape_str(input.impl().shape), shape_str(target.impl().shape));
  Tensor d = input - target;
  return reduce_loss(d * d, reduction);
}

namespace {

// The dtype of the uniforms a mask of `x` compares with a probability: f32 for f16/bf16 (24
// random bits, as PyTorch's fused dropout draws, where 8 would quantize p), f64 for f64.
DType mask_uniform_dtype(const Tensor& x) {
  return x.dtype() == DType::f64 ? DType::f64 : DType::f32;
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  KILN_OP_SCOPE;
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability must be in [0, 1], got {}", p);
  check_floating(x, "dropout");
  if (!training || p == 0.0) return x;
  if (p == 1.0) return x * 0;
  // Drawn on x's device: on CUDA a generated kernel, nothing copied through the host.
  Tensor keep = ge(rand_like(x, mask_uniform_dtype(x), gen), p);
  return x * cast(keep, x.dtype()) * (1.0 / (1.0 - p));
}

Tensor bernoulli(const Tensor& p, Generator* gen) {
  KILN_OP_SCOPE;
  check_floating(p, "bernoulli");
  if (p.numel() > 0 && !active_interceptor()) {
    // The range check reads two numbers back (a copy to the host for a CUDA tensor); a traced
    // p has no numbers to read, and a compiled bernoulli does not check, as torch.compile's.
    NoGradGuard no_grad;
    double lo = amin(p).item(), hi = amax(p).item();
    KILN_CHECK(lo >= 0 && hi <= 1, "bernoulli: probabilities must be in [0, 1], got {}",
               lo >= 0 ? hi : lo);
  }
  Tensor u = rand_like(p, mask_uniform_dtype(p), gen);
  return cast(lt(u, p.detach()), p.dtype());
}

Tensor bernoulli(const Tensor& x, double p, Generator* gen) {
  KILN_OP_SCOPE;
  KILN_CHECK(p >= 0.0 && p <= 1.0, "bernoulli: probability must be in [0, 1], got {}", p);
  Tensor u = rand_like(x, mask_uniform_dtype(x), gen);
  return cast(lt(u, p), x.dtype());
}

Tensor square(const Tensor& x) {
  KILN_OP_SCOPE;
  return x * x;
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  KILN_OP_SCOPE;
  check_floating(x, "leaky_relu");
  // f16/bf16 multiply in f32: a slope rounded to f16 first (0.01 -> 0.010002) would be off by
  // more than the result's rounding.
  Tensor xw = widened(x);
  return cast(where(gt(xw, 0), xw, xw * negative_slope), x.dtype());
}

namespace {
// As torch.clamp: bool tensors are not ordered values (the comparisons would promote them).
void check_clamp_input(const Tensor& x) {
  KILN_CHECK_AS(DTypeError, x.dtype() != DType::bool_,
                "clamp: not supported for bool tensors (shape {}); cast first",
                shape_str(x.impl().shape));
}
}  // namespace

Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  KILN_OP_SCOPE;
  check_clamp_input(x);
  KILN_CHECK(min || max, "clamp: at least one of min and max must be given (shape {})",
             shape_str(x.impl().shape));
  // x < min and x > max are false for NaN, so NaN passes through, and x == min or max keeps x
  // (and its gradient), as in PyTorch. With min > max everything becomes max. A NaN bound makes
  // the result NaN, as PyTorch's (eq(y, y) is true wherever y is not already NaN).
  Tensor y = x;
  auto is_nan = [](const Scalar& s) { return s.is_floating() && std::isnan(s.to_double()); };
  if (min) y = where(is_nan(*min) ? eq(y, y) : lt(y, *min), *min, y);
  if (max) y = where(is_nan(*max) ? eq(y, y) : gt(y, *max), *max, y);
  return y;
}

Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max) {
  KILN_OP_SCOPE;
  check_clamp_input(x);
  KILN_CHECK(min.defined() || max.defined(),
             "clamp: at least one of min and max must be given (shape {})",
             shape_str(x.impl().shape));
  // Checked here so a bad bound names clamp, not the lt/gt it lowers to.
  for (const Tensor* bound : {&min, &max})
    if (bound->defined()) broadcast_shapes(x.impl().shape, bound->impl().shape, "clamp");
  // NaN in a bound gives NaN there, as PyTorch's clamp (ne(b, b) holds where b is NaN).
  auto or_nan = [](const Tensor& cond, const Tensor& b) {
    return is_floating(b.dtype()) ? logical_or(cond, ne(b, b)) : cond;
  };
  Tensor y = x;
  if (min.defined()) y = where(or_nan(lt(y, min), min), min, y);
  if (max.defined()) y = where(or_nan(gt(y, max), max), max, y);
  return y;
}

Tensor clamp_min(const Tensor& x, Scalar min) {
  return clamp(x, min, std::nullopt);
}
Tensor clamp_max(const Tensor& x, Scalar max) {
  return clamp(x, std::nullopt, max);
}

namespace {
void check_mask(const Tensor& x, const Tensor& mask) {
  KILN_CHECK_AS(DTypeError, mask.dtype() == DType::bool_,
                "masked_fill: mask must have dtype bool, got {} (shape {})", mask.dtype(),
                shape_str(mask.impl().shape));
  Shape out = broadcast_shapes(x.impl().shape, mask.impl().shape, "masked_fill");
  KILN_CHECK_AS(ShapeError, out == x.impl().shape,
                "masked_fill: mask of shape {} does not broadcast to the input's shape {}",
                shape_str(mask.impl().shape), shape_str(x.impl().shape));
}
}  // namespace

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  KILN_OP_SCOPE;
  check_mask(x, mask);
  // Converting NaN, inf or an out-of-range number to an integer is undefined (PyTorch rejects it).
  double fill = value.to_double();
  double limit = x.dtype() == DType::i32 ? 0x1p31 : 0x1p63;
  KILN_CHECK(!is_integral(x.dtype()) || (fill > -limit - 1 && fill < limit),
             "masked_fill: value {} does not fit the {} tensor of shape {}", fill, x.dtype(),
             shape_str(x.impl().shape));
  // The value takes x's dtype, as in PyTorch (a float filled into an integer tensor truncates).
  Tensor v = scalar_tensor(value, x.dtype());
  return where(mask, x.device().is_cpu() ? v : v.to(x.device()), x);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value) {
  KILN_OP_SCOPE;
  check_mask(x, mask);
  KILN_CHECK_AS(ShapeError, value.dim() == 0,
                "masked_fill: the value must be a 0-d tensor, got shape {}",
                shape_str(value.impl().shape));
  return where(mask, cast(value, x.dtype()), x);
}

}  // namespace kiln
