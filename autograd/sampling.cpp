// multinomial and next-token sampling (see sampling.h).
#include "autograd/sampling.h"

#include <cmath>
#include <limits>

#include "autograd/ops.h"
#include "runtime/grad_mode.h"
#include "runtime/trace_hooks.h"

namespace kiln {

namespace {

// Weights as the draw reads them: detached, as [B, V], half precision in f32.
Tensor as_weight_rows(const Tensor& probs) {
  Tensor p = probs.detach();
  if (p.dtype() == DType::f16 || p.dtype() == DType::bf16) p = cast(p, DType::f32);
  return p.dim() == 1 ? unsqueeze(p, 0) : p;
}

// The weights' rules, read back from the device (not while tracing: no numbers to read).
void check_weights(const Tensor& p, std::int64_t num_samples, bool replacement) {
  if (active_interceptor() || p.numel() == 0) return;
  NoGradGuard no_grad;
  double lo = amin(p).item(), hi = amax(p).item();
  KILN_CHECK(lo >= 0 && std::isfinite(hi),
             "multinomial: probabilities must be finite and non-negative, got {} (shape {})",
             lo < 0 ? lo : hi, shape_str(p.shape()));
  double emptiest = amin(sum(p, {-1})).item();
  KILN_CHECK(emptiest > 0, "multinomial: a row of probabilities sums to {} (shape {})", emptiest,
             shape_str(p.shape()));
  if (!replacement) {
    double fewest = amin(sum(gt(p, 0), {-1})).item();
    KILN_CHECK(fewest >= static_cast<double>(num_samples),
               "multinomial: {} samples without replacement, but a row has only {} positive "
               "probabilities (shape {})",
               num_samples, fewest, shape_str(p.shape()));
  }
}

// Draws from rows [B, V] of checked weights: [B, num_samples].
Tensor draw_rows(const Tensor& p, std::int64_t num_samples, bool replacement, Generator* gen) {
  if (!replacement) {
    // Weighted sampling without repeats: the num_samples largest keys log(1 - u)/p_i, where
    // 1 - u is in (0, 1]; a zero weight's key is -inf.
    Tensor u = rand_like(p, gen);
    Tensor keys = where(gt(p, 0), log(1.0 - u) / p, -std::numeric_limits<double>::infinity());
    return topk(keys, num_samples).indices;
  }
  // The inverse CDF of each uniform: how many cumulative weights are at most u * total, which
  // skips zero weights; rounding that reaches the total picks the last positive weight.
  Tensor cdf = cumsum(p, -1);
  Tensor total = slice(cdf, -1, -1, std::numeric_limits<std::int64_t>::max());  // [B, 1]
  SymShape shape = p.sym_shape();
  shape.back() = num_samples;
  Tensor u = rand_like(expand(total, shape), gen);  // [B, num_samples]
  Tensor below = sum(le(unsqueeze(cdf, 1), unsqueeze(u * total, -1)), {-1});
  Tensor last_positive = sum(lt(cdf, total), {-1}, true);
  return minimum(below, last_positive);
}

}  // namespace

Tensor multinomial(const Tensor& probs, std::int64_t num_samples, bool replacement,
                   Generator* gen) {
  KILN_OP_SCOPE;
  KILN_CHECK_AS(DTypeError, is_floating(probs.dtype()),
                "multinomial: probabilities must be floating, got {} (shape {})", probs.dtype(),
                shape_str(probs.shape()));
  KILN_CHECK_AS(ShapeError, probs.dim() == 1 || probs.dim() == 2,
                "multinomial: probabilities must be [V] or [B, V], got shape {}",
                shape_str(probs.shape()));
  std::int64_t categories = probs.shape().back();
  KILN_CHECK(num_samples > 0, "multinomial: num_samples must be positive, got {}", num_samples);
  KILN_CHECK(replacement || num_samples <= categories,
             "multinomial: {} samples without replacement from {} categories (shape {})",
             num_samples, categories, shape_str(probs.shape()));
  Tensor p = as_weight_rows(probs);
  check_weights(p, num_samples, replacement);
  Tensor drawn = draw_rows(p, num_samples, replacement, gen);
  return probs.dim() == 1 ? squeeze(drawn, 0) : drawn;
}

Tensor sample_next(const Tensor& logits, const SamplingOptions& options, Generator* gen) {
  KILN_OP_SCOPE;
  KILN_CHECK_AS(ShapeError, logits.dim() == 1 || logits.dim() == 2,
                "sample_next: logits must be [V] or [B, V], got shape {}",
                shape_str(logits.shape()));
  KILN_CHECK(options.temperature >= 0 && std::isfinite(options.temperature),
             "sample_next: temperature must be finite and >= 0, got {}", options.temperature);
  KILN_CHECK(options.top_k >= 0, "sample_next: top_k must be >= 0, got {}", options.top_k);
  KILN_CHECK(options.top_p > 0 && options.top_p <= 1,
             "sample_next: top_p must be in (0, 1], got {}", options.top_p);
  NoGradGuard no_grad;
  if (options.temperature == 0) return argmax(logits, -1);
  Tensor z = as_weight_rows(logits) / options.temperature;
  std::int64_t vocab = z.shape().back();
  const double minus_inf = -std::numeric_limits<double>::infinity();
  if (options.top_k > 0 && options.top_k < vocab) {
    Tensor kth = slice(topk(z, options.top_k).values, -1, options.top_k - 1, options.top_k);
    z = where(lt(z, kth), minus_inf, z);
  }
  Tensor token;
  if (options.top_p < 1) {
    // In sorted order: keep the tokens whose mass before them is below top_p, draw a position,
    // and map it back through the sort's indices.
    auto [sorted, order] = sort(z, -1, true);
    Tensor probs = softmax(sorted, -1);
    Tensor kept = where(lt(cumsum(probs, -1) - probs, options.top_p), probs, 0.0);
    token = gather(order, -1, draw_rows(kept, 1, true, gen));
  } else {
    token = draw_rows(softmax(z, -1), 1, true, gen);
  }
  token = squeeze(token, -1);
  return logits.dim() == 1 ? squeeze(token, 0) : token;
}

}  // namespace kiln
