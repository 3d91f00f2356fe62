// Rendering and launching the cached_attention kernels (see cached_attention.h).
#include "jit/codegen/cached_attention.h"

#include <fmt/format.h>

#include <algorithm>

#include "jit/codegen/cuda_expr.h"
#include "jit/codegen/templates.h"
#include "runtime/device_checks.h"
#include "runtime/grad_mode.h"

namespace kiln::jit::codegen {
namespace {

using Data = kainjow::mustache::data;

// Query rows a block holds (a group's heads x new tokens), cache rows per tile, threads: 8 x 256
// queries, a 32 x 257 tile and the probabilities stay under 48 KiB of shared memory.
constexpr int kRows = 8, kKeyTile = 32, kThreads = 128;
constexpr int kMaxHeadDim = 256;
// A chunk is at least this many cache rows, so that a part's write is small beside its reads.
constexpr long long kMinChunk = 256;

KernelHandle render_part(DType dtype, int head_d, int head_dv, const char* part) {
  std::string base =
      fmt::format("k_cached_attention_{}_d{}_dv{}", dtype_name(dtype), head_d, head_dv);
  Data d;
  d.set("name", base);
  d.set("description", fmt::format("cached_attention({}, head dims {} / {}), {}", dtype_name(dtype),
                                   head_d, head_dv, part));
  d.set(part, true);
  d.set("head_d", std::to_string(head_d));
  d.set("head_dv", std::to_string(head_dv));
  d.set("rows", std::to_string(kRows));
  d.set("key_tile", std::to_string(kKeyTile));
  d.set("threads", std::to_string(kThreads));
  d.set("storage", storage_type(dtype));
  d.set("fp16", dtype == DType::f16);
  d.set("bf16", dtype == DType::bf16);
  d.set("load_q", load_expr(dtype, "q[b * qb + head * qh + t * qt + c]"));
  d.set("load_k", load_expr(dtype, "kbase[(t0 + j) * kr + c]"));
  d.set("load_v", load_expr(dtype, "vbase[(t0 + j) * vr + c]"));
  d.set("store_out", store_expr(dtype, "o"));
  return KernelHandle(fmt::format("{}_{}", base, part),
                      render_template("cached_attention.cu.mustache", d));
}

// `t` with a contiguous last dim (a copy only where it is strided).
Tensor rows_contiguous(const Tensor& t) {
  return t.dim() > 0 && t.strides().back() != 1 && t.shape().back() > 1 ? t.contiguous() : t;
}

}  // namespace

std::string cached_attention_unsupported(DType dtype, std::int64_t head_d, std::int64_t head_dv) {
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16)
    return fmt::format("cached_attention: the kernels take f32, f16 and bf16, not {}", dtype);
  if (head_d < 1 || head_d > kMaxHeadDim || head_dv < 1 || head_dv > kMaxHeadDim)
    return fmt::format("cached_attention: head dims {} / {} are outside 1..{}", head_d, head_dv,
                       kMaxHeadDim);
  return "";
}

CachedAttentionKernel render_cached_attention(DType dtype, int head_d, int head_dv) {
  const std::string why = cached_attention_unsupported(dtype, head_d, head_dv);
  KILN_CHECK(why.empty(), "{}", why);
  return {render_part(dtype, head_d, head_dv, "partial"),
          render_part(dtype, head_d, head_dv, "combine"), head_d, head_dv};
}

CachedAttentionSplit cached_attention_split(long long blocks_per_chunk, long long cache_rows,
                                            long long sm_count) {
  // Two blocks per SM in all; a chunk never below kMinChunk rows (nor past the cache).
  long long wanted =
      std::max<long long>(1, (2 * sm_count + blocks_per_chunk - 1) / blocks_per_chunk);
  long long chunk = std::max(kMinChunk, (cache_rows + wanted - 1) / wanted);
  chunk = (chunk + kKeyTile - 1) / kKeyTile * kKeyTile;
  long long chunks = std::max<long long>(1, (cache_rows + chunk - 1) / chunk);
  return {chunk, chunks};
}

Tensor run_cached_attention(const CachedAttentionKernel& kernel, std::span<const Tensor> inputs,
                            const OpAttrs& attrs) {
  NoGradGuard no_grad;
  Tensor q = rows_contiguous(inputs[0]), k = rows_contiguous(inputs[1]);
  Tensor v = rows_contiguous(inputs[2]);
  Tensor lengths = inputs[3].contiguous(), starts = inputs[4].contiguous();
  KILN_CHECK(q.shape().back() == kernel.head_d && v.shape().back() == kernel.head_dv,
             "cached_attention: kernels for head dims {} / {} given q {} and v_cache {}",
             kernel.head_d, kernel.head_dv, shape_str(q.shape()), shape_str(v.shape()));
  const Shape& qs = q.shape();
  int batch = static_cast<int>(qs[0]), heads = static_cast<int>(qs[1]);
  int time = static_cast<int>(qs[2]), kv_heads = static_cast<int>(k.shape()[1]);
  int cache = static_cast<int>(k.shape()[2]);
  Tensor out = empty({batch, heads, time, kernel.head_dv}, q.dtype(), Device::cuda());
  if (out.numel() == 0) return out;
  long long query_rows = static_cast<long long>(batch) * heads * time;
  const int group = heads / kv_heads;
  int row_tiles = (group * time + kRows - 1) / kRows;
  const long long blocks_per_chunk = static_cast<long long>(batch) * kv_heads * row_tiles;
  KILN_CHECK(blocks_per_chunk <= 65535,
             "cached_attention: {} sequences x {} kv heads x {} row "
             "tiles of q {} are too many for one launch",
             batch, kv_heads, row_tiles, shape_str(qs));
  CachedAttentionSplit split =
      cached_attention_split(blocks_per_chunk, cache, cuda::backend().properties(0).sm_count);
  int direct = split.chunks == 1, chunk = static_cast<int>(split.chunk);
  Tensor parts, lses;
  if (!direct) {
    parts = empty({split.chunks, query_rows, kernel.head_dv}, DType::f32, Device::cuda());
    lses = empty({split.chunks, query_rows}, DType::f32, Device::cuda());
  }
  DeviceCheck check = reserve_device_check([batch](std::span<const std::int64_t> e) {
    long long b = (e[0] - 1) / 2;
    const char* what = (e[0] - 1) % 2 == 0 ? "lengths" : "starts";
    throw IndexError(
        fmt::format("cached_attention: {}[{}] = {} is out of range for the cache "
                    "(of {} sequences){}",
                    what, b, e[1], batch, device_check_note()));
  });
  cuda::DevicePtr pq = device_address(q), pk = device_address(k), pv = device_address(v),
                  plen = device_address(lengths), pstart = device_address(starts),
                  ppart = direct ? 0 : device_address(parts),
                  plse = direct ? 0 : device_address(lses), pout = device_address(out),
                  perror = check.flag();
  long long qb = q.strides()[0], qh = q.strides()[1], qt = q.strides()[2];
  long long kb = k.strides()[0], kh = k.strides()[1], kr = k.strides()[2];
  long long vb = v.strides()[0], vh = v.strides()[1], vr = v.strides()[2];
  float scale = static_cast<float>(attrs.scale);
  void* params[] = {&pq,    &pk,        &pv,    &plen,       &pstart,   &ppart, &plse,
                    &pout,  &qb,        &qh,    &qt,         &kb,       &kh,    &kr,
                    &vb,    &vh,        &vr,    &heads,      &kv_heads, &time,  &cache,
                    &chunk, &row_tiles, &scale, &query_rows, &direct,   &perror};
  // The plan's count: the whole cache, an upper bound (the live length is a device value).
  std::int64_t cache_bytes = tensor_bytes(k) + tensor_bytes(v);
  std::int64_t part_bytes = direct ? 0 : tensor_bytes(parts) + tensor_bytes(lses);
  kernel.partial.launch(
      {static_cast<unsigned>(split.chunks), static_cast<unsigned>(blocks_per_chunk), 1},
      {kThreads, 1, 1}, params, tensor_bytes(q) + cache_bytes,
      direct ? tensor_bytes(out) : part_bytes);
  check.launched();
  if (direct) return out;
  int chunks = static_cast<int>(split.chunks);
  void* combine_params[] = {&ppart, &plse, &pout, &query_rows, &chunks};
  unsigned threads = static_cast<unsigned>(std::min(kernel.head_dv, 256));
  kernel.combine.launch({static_cast<unsigned>(query_rows), 1, 1}, {threads, 1, 1}, combine_params,
                        part_bytes, tensor_bytes(out));
  return out;
}

}  // namespace kiln::jit::codegen
