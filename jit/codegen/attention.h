// Fused scaled-dot-product attention on CUDA tensors: FlashAttention forward and
// FlashAttention-2 backward kernels rendered from templates/attention_*.cu (tensor cores for
// f16/bf16; FMAs for f32, or TF32 tensor cores with KILN_MATMUL_TF32=1), launched directly on
// tensors. What the CUDA backend runs for the `attention` and `attention_backward` ops; callable
// without the op table.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "graph/attention_rewrite.h"
#include "jit/codegen/kernel_cache.h"
#include "runtime/op.h"
#include "runtime/tensor.h"

namespace kiln::jit::codegen {

struct AttentionCall {
  Tensor q, k, v;  // CUDA tensors, [..., T, d], [..., S, d], [..., S, dv]
  // bool (true = attend) or floating (added to the scores), broadcastable to [..., T, S]
  std::optional<Tensor> mask;
  double scale = 0;     // already resolved (never 0 here)
  bool causal = false;  // key j visible to query i iff j <= i (top-left aligned)
  // Dropout of the probabilities (runtime/ops.def): rate (0: none) and the draw's seed and offset.
  double dropout = 0;
  std::int64_t seed = 0, offset = 0;
};

// The call an `attention` (q, k, v [, mask]) or `attention_backward` (q, k, v, out, lse, dout
// [, mask]) node makes with these operands.
AttentionCall attention_call(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs);

// Head dims the kernels are specialized for (each a compile-time constant of its kernel; one that
// is not a multiple of 16 is zero-padded inside the kernel). The tiles live in dynamic shared
// memory and are chosen within the device's per-block budget (attention_tiling.h); a head dim
// whose smallest tiles exceed it (f32 past about 200 on a device of 48 KB) is refused.
inline constexpr int kAttentionMinHeadDim = 1;
inline constexpr int kAttentionMaxHeadDim = 256;

// Why the fused kernels cannot take this call (dtype, head dim out of range, shapes that do not
// match, ...), or "". Names the op and the shapes.
std::string attention_unsupported(const AttentionCall& call);
// The same from shapes and dtypes alone (devices aside): what the attention rewrite asks before
// replacing a match, through graph::AttentionKernels, which this library registers.
std::string attention_unsupported(const graph::AttentionSignature& call);
// The same for a device whose blocks may have `shared_budget` bytes of shared memory.
std::string attention_unsupported(const graph::AttentionSignature& call,
                                  std::int64_t shared_budget);

// The tiles the `backward` (else forward) kernel of this dtype and these head dims takes on the
// current device, in words ("tiles w4n32s2: 4 warps ..."), or "" where no kernel takes it:
// what explain() prints beside an attention step.
std::string attention_tiles_note(DType dtype, int head_qk, int head_v, bool backward);

// out [..., T, dv] in q's dtype and lse [..., T] in f32 (natural log of each row's sum of
// exponentials of the scaled, masked scores); a fully masked row gives out 0 and lse -inf.
// kiln::Error (the reason above) when the kernels cannot take the call. `out_into`: a tensor of
// out's shape and dtype, any strides, that the kernel writes instead of allocating one.
struct AttentionForward {
  Tensor out, lse;
};
AttentionForward attention_forward(const AttentionCall& call,
                                   const std::optional<Tensor>& out_into = std::nullopt);

// Gradients of out (given dout) with respect to q, k and v, from the forward's out and lse.
// Rows whose lse is -inf contribute nothing. Deterministic: no atomics. A gradient given in
// `into` (of its operand's shape, any strides; the operand must not broadcast) is written there.
struct AttentionGrads {
  Tensor dq, dk, dv;
};
struct AttentionGradsInto {
  std::optional<Tensor> dq, dk, dv;
};
AttentionGrads attention_backward(const AttentionCall& call, const Tensor& out, const Tensor& lse,
                                  const Tensor& dout, const AttentionGradsInto& into = {});

// The op's outputs on the fused kernels, for a call they take: attention's {out, lse}, or
// attention_backward's {dq, dk, dv} from `inputs` (q, k, v, out, lse, dout, ...).
std::vector<Tensor> run_fused_attention(OpId op, const AttentionCall& call,
                                        std::span<const Tensor> inputs);

// The two kernels (forward, backward) calls of this dtype and these head dims launch, rendered but
// not compiled: what the real-GPU build checks compile. `mask` is the mask's dtype, if any;
// `vector_loads` the cp.async layout (rows contiguous and 16-byte aligned); `tf32` the f32
// kernels on tensor cores (what KILN_MATMUL_TF32=1 launches); `shared_budget` the per-block
// shared memory the tiles are chosen within (default: the current device's).
std::vector<KernelHandle> render_attention_kernels(
    DType dtype, int head_qk, int head_v, std::optional<DType> mask, bool vector_loads,
    int batch_rank = 1, bool tf32 = false,
    std::optional<std::int64_t> shared_budget = std::nullopt);

}  // namespace kiln::jit::codegen
