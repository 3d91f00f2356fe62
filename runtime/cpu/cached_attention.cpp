// cached_attention on the host (runtime/ops.def): each query row's softmax over the cache rows it
// sees, starts[b] <= j <= lengths[b] - T + t, accumulated in f64 (f32 inputs round once). The
// reference the split-KV CUDA kernels are checked against.
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "runtime/cpu/kernels.h"

namespace kiln::cpu {

Tensor cached_attention(std::span<const Tensor> in, const OpAttrs& attrs, const TensorMeta& out) {
  const Shape &qs = in[0].shape(), &ks = in[1].shape(), &vs = in[2].shape();
  const std::int64_t batch = qs[0], heads = qs[1], time = qs[2], d = qs[3];
  const std::int64_t kv_heads = ks[1], cache = ks[2], dv = vs[3], group = heads / kv_heads;
  Tensor q = materialize(in[0], qs, DType::f64), k = materialize(in[1], ks, DType::f64);
  Tensor v = materialize(in[2], vs, DType::f64);
  Tensor lengths = materialize(in[3], in[3].shape(), DType::i64);
  Tensor starts = materialize(in[4], in[4].shape(), DType::i64);
  const auto* pq = static_cast<const double*>(q.raw_data());
  const auto* pk = static_cast<const double*>(k.raw_data());
  const auto* pv = static_cast<const double*>(v.raw_data());
  const auto* plen = static_cast<const std::int64_t*>(lengths.raw_data());
  const auto* pstart = static_cast<const std::int64_t*>(starts.raw_data());
  Tensor result = zeros(out.shape, DType::f64, Device::cpu());
  auto* po = static_cast<double*>(result.raw_data());
  std::vector<double> scores;
  for (std::int64_t b = 0; b < batch; ++b) {
    KILN_CHECK_AS(IndexError, plen[b] >= time && plen[b] <= cache,
                  "cached_attention: lengths[{}] = {} is out of range for {} new queries over a "
                  "cache of {} rows",
                  b, plen[b], time, cache);
    KILN_CHECK_AS(IndexError, pstart[b] >= 0 && pstart[b] <= cache,
                  "cached_attention: starts[{}] = {} is out of range for a cache of {} rows", b,
                  pstart[b], cache);
    for (std::int64_t h = 0; h < heads; ++h) {
      const double* kh = pk + (b * kv_heads + h / group) * cache * d;
      const double* vh = pv + (b * kv_heads + h / group) * cache * dv;
      for (std::int64_t t = 0; t < time; ++t) {
        const double* qr = pq + ((b * heads + h) * time + t) * d;
        double* o = po + ((b * heads + h) * time + t) * dv;
        const std::int64_t first = pstart[b], last = plen[b] - time + t;  // inclusive
        if (last < first) continue;  // a padding query: no row to attend, out 0
        scores.assign(static_cast<std::size_t>(last - first + 1), 0.0);
        double peak = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = first; j <= last; ++j) {
          double s = 0;
          for (std::int64_t c = 0; c < d; ++c) s += qr[c] * kh[j * d + c];
          scores[j - first] = s * attrs.scale;
          peak = std::max(peak, scores[j - first]);
        }
        double sum = 0;
        for (double& s : scores) sum += (s = std::exp(s - peak));
        for (std::int64_t j = first; j <= last; ++j)
          for (std::int64_t c = 0; c < dv; ++c) o[c] += scores[j - first] / sum * vh[j * dv + c];
      }
    }
  }
  return materialize(result, out.shape, out.dtype);
}

}  // namespace kiln::cpu
