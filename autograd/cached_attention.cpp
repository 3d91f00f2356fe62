// The cached_attention API (autograd/ops.h): decoding attention over a KV cache's live rows.
#include <cmath>

#include "autograd/attention.h"
#include "autograd/ops.h"
#include "autograd/record.h"

namespace kiln {

Tensor cached_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                        const Tensor& lengths, const Tensor& starts, std::optional<double> scale) {
  KILN_OP_SCOPE;
  KILN_CHECK_AS(ShapeError, q.defined() && q.dim() == 4,
                "cached_attention: q must be [B, heads, T, head dim], got {}",
                q.defined() ? shape_str(q.shape()) : std::string("an undefined tensor"));
  OpAttrs attrs;
  std::int64_t d = q.shape().back();
  attrs.scale = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(d > 0 ? d : 1));
  Tensor first = starts.defined() ? starts : zeros_like(lengths);
  return autograd::record_outputs(OpId::cached_attention, {q, k_cache, v_cache, lengths, first},
                                  attrs)[0];
}

}  // namespace kiln

namespace kiln::autograd {

Tensor cached_attention_decomposed(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                   const Tensor& lengths, const Tensor& starts, double scale) {
  const std::int64_t batch = q.shape()[0], time = q.shape()[2], cache = k_cache.shape()[2];
  Tensor rows = device_counts(cache, 3, 4, DType::i64, q.device());   // [1, 1, 1, S]
  Tensor tokens = device_counts(time, 2, 4, DType::i64, q.device());  // [1, 1, T, 1]
  Tensor last = lengths.reshape({batch, 1, 1, 1}) - scalar_tensor(time, DType::i64) +
                tokens;  // each query's position
  Tensor visible = logical_and(ge(rows, starts.reshape({batch, 1, 1, 1})), le(rows, last));
  return attention_decomposed(q, k_cache, v_cache, visible, scale, false).out;
}

}  // namespace kiln::autograd
