// The cached_attention kernels (templates/cached_attention.cu): split-KV decoding attention over a
// KV cache's live rows. One launch when one chunk of the cache fills the GPU, else a partial
// kernel over (chunk, sequence x kv head x query-row tile) and a combine by log-sum-exp.
#pragma once

#include <span>
#include <string>

#include "jit/codegen/kernel_cache.h"
#include "runtime/op.h"
#include "runtime/tensor.h"

namespace kiln::jit::codegen {

struct CachedAttentionKernel {
  KernelHandle partial;  // one chunk's part per block (or the output, with one chunk)
  KernelHandle combine;  // the parts weighed by their log-sum-exp
  int head_d = 0, head_dv = 0;
};

// Why the kernels cannot take q, k_cache, v_cache of these dtypes and head dims, or "".
std::string cached_attention_unsupported(DType dtype, std::int64_t head_d, std::int64_t head_dv);
CachedAttentionKernel render_cached_attention(DType dtype, int head_d, int head_dv);

// How the cache of `cache_rows` rows is cut: rows per chunk and chunks, chosen from the cache's
// capacity (never its live length, a device value), so that a captured graph serves every length.
struct CachedAttentionSplit {
  long long chunk = 0, chunks = 1;
};
CachedAttentionSplit cached_attention_split(long long blocks_per_chunk, long long cache_rows,
                                            long long sm_count);

// out [B, H, T, dv] of the op's inputs (q, k_cache, v_cache, lengths, starts), CUDA tensors.
Tensor run_cached_attention(const CachedAttentionKernel& kernel, std::span<const Tensor> inputs,
                            const OpAttrs& attrs);

}  // namespace kiln::jit::codegen
