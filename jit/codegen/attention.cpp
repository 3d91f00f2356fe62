// Checks and launches of the FlashAttention kernels (see attention.h); their variants and
// rendering are attention_kernels.cpp's.
#include "jit/codegen/attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "jit/codegen/attention_kernels.h"
#include "jit/codegen/attention_tiling.h"
#include "jit/codegen/lt_matmul.h"
#include "runtime/attention_heads.h"
#include "runtime/attention_inputs.h"
#include "runtime/error.h"

namespace kiln::jit::codegen {
namespace {

using namespace attention_tiles;
using attention_kernels::device_shared_budget;
using attention_kernels::kernel_for;
using attention_kernels::Variant;

std::string shapes_of(const graph::AttentionSignature& c) {
  std::string s =
      fmt::format("q {} {}, k {} {}, v {} {}", shape_str(c.q), dtype_name(c.q_dtype),
                  shape_str(c.k), dtype_name(c.k_dtype), shape_str(c.v), dtype_name(c.v_dtype));
  if (c.mask) s += fmt::format(", mask {} {}", shape_str(*c.mask), dtype_name(*c.mask_dtype));
  return s;
}

std::string shapes_of(const AttentionCall& c) {
  std::string s =
      fmt::format("q {} {}, k {} {}, v {} {}", shape_str(c.q.shape()), dtype_name(c.q.dtype()),
                  shape_str(c.k.shape()), dtype_name(c.k.dtype()), shape_str(c.v.shape()),
                  dtype_name(c.v.dtype()));
  if (c.mask)
    s += fmt::format(", mask {} {}", shape_str(c.mask->shape()), dtype_name(c.mask->dtype()));
  return s;
}

Shape batch_of(const Shape& s) {
  return Shape(s.begin(), s.end() - 2);
}

// The broadcast batch shape of q, k and v, k and v's heads counted as q's under grouped-query
// attention; kiln::Error naming the shapes when they do not broadcast.
Shape batch_shape(const Shape& q, const Shape& k, const Shape& v) {
  std::int64_t group = attention_group(q, k, v, "attention");
  auto kv_batch = [&](const Shape& x) {
    Shape b = batch_of(x);
    if (group > 1 && !b.empty() && b.back() > 1) b.back() *= group;
    return b;
  };
  return broadcast_shapes(broadcast_shapes(batch_of(q), kv_batch(k), "attention"), kv_batch(v),
                          "attention");
}

std::int64_t group_of(const AttentionCall& c) {
  return attention_group(c.q.shape(), c.k.shape(), c.v.shape(), "attention");
}

// Grouped-query attention as the broadcast call the kernels take (runtime/attention_heads.h):
// q and the mask split [..., Hkv, g, T, .], k and v given a size-1 group dim; all views, so each
// kv head is read in place by the g query heads of its group.
Tensor query_view(const Tensor& x, std::int64_t group, std::size_t trailing) {
  return x.reshape(grouped_query_shape(x.shape(), group, trailing));
}
AttentionCall grouped_call(const AttentionCall& c, std::int64_t group) {
  AttentionCall g = c;
  g.q = query_view(c.q, group, 2);
  g.k = c.k.reshape(grouped_kv_shape(c.k.shape(), 2));
  g.v = c.v.reshape(grouped_kv_shape(c.v.shape(), 2));
  if (c.mask) g.mask = query_view(*c.mask, group, 2);
  return g;
}
Tensor ungrouped(const Tensor& x, std::size_t trailing) {
  return x.reshape(ungrouped_shape(x.shape(), trailing));
}

// The kernels' layout arguments: batch sizes, then per operand its batch strides (right-aligned,
// 0 where it broadcasts), row and column strides; then T and S (kiln_attn_params). Operands are
// q, k, v, o, dout, mask, dq, dk, dv; the forward's output is its o.
struct Layout {
  Shape batch;
  int rank = 1;
  std::int64_t batches = 1, t = 0, s = 0;
  std::vector<long long> words;

  void add_operand(const Tensor* x) {
    for (int d = 0; d < rank; ++d) {
      long long stride = 0;
      if (x) {
        auto xr = static_cast<int>(x->dim()) - 2;
        int xd = xr - (rank - d);
        auto bd = static_cast<int>(batch.size()) - (rank - d);
        if (bd >= 0 && xd >= 0 && x->shape()[xd] != 1) stride = x->strides()[xd];
      }
      words.push_back(stride);
    }
    words.push_back(x ? x->strides()[x->dim() - 2] : 0);
    words.push_back(x ? x->strides()[x->dim() - 1] : 0);
  }
};

// A rank-2+ view of the mask with [.., T, S] trailing dims (size-1 dims expanded to stride 0).
Tensor mask_view(const Tensor& mask, const Shape& batch, std::int64_t t, std::int64_t s) {
  Shape full = batch;
  full.push_back(t);
  full.push_back(s);
  return mask.expand(full);
}

Layout layout_of(const AttentionCall& c, const Shape& batch, const Tensor* o, const Tensor* dout,
                 const Tensor* mask, const AttentionGrads* grads = nullptr) {
  Layout l;
  l.batch = batch;
  l.rank = std::max<int>(1, static_cast<int>(batch.size()));
  for (auto b : batch) l.batches *= b;
  for (int d = 0; d < l.rank; ++d)
    l.words.push_back(static_cast<int>(batch.size()) > d ? batch[d] : 1);
  l.t = c.q.shape()[c.q.dim() - 2];
  l.s = c.k.shape()[c.k.dim() - 2];
  for (const Tensor* x : {&c.q, &c.k, &c.v, o, dout, mask}) l.add_operand(x);
  for (const Tensor* x :
       {grads ? &grads->dq : nullptr, grads ? &grads->dk : nullptr, grads ? &grads->dv : nullptr})
    l.add_operand(x);
  l.words.push_back(l.t);
  l.words.push_back(l.s);
  return l;
}

// cp.async copies 16-byte chunks: every row of every element operand contiguous and 16-byte
// aligned, and the head dims whole chunks.
bool vector_loads_fit(const std::vector<const Tensor*>& operands, const AttentionCall& c) {
  auto chunk = static_cast<std::int64_t>(16 / itemsize(c.q.dtype()));
  if (c.q.shape().back() % chunk || c.v.shape().back() % chunk) return false;
  for (const Tensor* x : operands) {
    if (x->strides().back() != 1 && x->shape().back() != 1) return false;
    if (reinterpret_cast<std::uintptr_t>(x->raw_data()) % 16) return false;
    for (std::int64_t d = 0; d + 1 < x->dim(); ++d)
      if (x->shape()[d] != 1 && x->strides()[d] % chunk) return false;
  }
  return true;
}

// The innermost batch dim's size when k and v do not move along it (size 1 or absent there)
// and q does, else 1.
std::int64_t kv_group_of(const AttentionCall& c, const Shape& batch) {
  if (batch.empty() || batch.back() <= 1) return 1;
  for (const Tensor* x : {&c.k, &c.v})
    if (x->dim() >= 3 && x->shape()[x->dim() - 3] != 1) return 1;
  return batch.back();
}

// The gradient computed at the broadcast batch shape, summed back to the operand's shape.
Tensor reduce_to(const Tensor& full, const Shape& target) {
  if (full.shape() == target) return full;
  if (full.numel() == numel(target)) return full.reshape(target);  // size-1 dims only
  auto extra = full.dim() - static_cast<std::int64_t>(target.size());
  std::vector<std::int64_t> dims;
  for (std::int64_t d = 0; d < full.dim(); ++d)
    if (d < extra || (target[d - extra] == 1 && full.shape()[d] != 1)) dims.push_back(d);
  return full.sum(dims, true).reshape(target);
}

// A tensor handed to a launch (the backward's out, dout and lse, a placed output): a CUDA
// tensor of exactly this shape and dtype, any strides.
void require_tensor(const Tensor& x, std::string_view what, const Shape& shape, DType dtype,
                    const AttentionCall& c) {
  KILN_CHECK(x.defined() && x.device().is_cuda() && x.shape() == shape && x.dtype() == dtype,
             "{} must be {} {} on CUDA, got {} {} ({})", what, dtype_name(dtype), shape_str(shape),
             x.defined() ? dtype_name(x.dtype()) : "undefined",
             x.defined() ? shape_str(x.shape()) : "", shapes_of(c));
}

// An output the caller placed, or a new one.
Tensor placed_output(const std::optional<Tensor>& into, const char* what, const Shape& shape,
                     DType dtype, const AttentionCall& c) {
  if (!into) return empty(shape, dtype, Device::cuda());
  require_tensor(*into, fmt::format("attention: the tensor given for {}", what), shape, dtype, c);
  return *into;
}

void check(const AttentionCall& call) {
  std::string why = attention_unsupported(call);
  KILN_CHECK(why.empty(), "{}", why);
}

}  // namespace

AttentionCall attention_call(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs) {
  AttentionCall call;
  call.q = inputs[0];
  call.k = inputs[1];
  call.v = inputs[2];
  AttentionInputs layout = attention_inputs(op, inputs.size(), attrs);
  if (layout.mask) call.mask = inputs[*layout.mask];
  call.scale = attrs.scale;
  call.causal = attrs.causal;
  if (layout.seed) {
    // Numbers on the host, passed to the kernels by value.
    call.dropout = attrs.dropout;
    call.seed = inputs[*layout.seed].to(Device::cpu()).to_vector<std::int64_t>().at(0);
    call.offset = inputs[*layout.seed + 1].to(Device::cpu()).to_vector<std::int64_t>().at(0);
  }
  return call;
}

graph::AttentionSignature signature_of(const AttentionCall& c) {
  graph::AttentionSignature s;
  s.q = c.q.shape();
  s.k = c.k.shape();
  s.v = c.v.shape();
  s.q_dtype = c.q.dtype();
  s.k_dtype = c.k.dtype();
  s.v_dtype = c.v.dtype();
  if (c.mask) {
    s.mask = c.mask->shape();
    s.mask_dtype = c.mask->dtype();
  }
  s.scale = c.scale;
  s.causal = c.causal;
  return s;
}

std::string attention_unsupported(const AttentionCall& c) {
  if (!c.q.defined() || !c.k.defined() || !c.v.defined()) return "attention: q, k or v missing";
  for (const Tensor* x : {&c.q, &c.k, &c.v})
    if (!x->device().is_cuda())
      return fmt::format("attention: the fused kernels take CUDA tensors ({})", shapes_of(c));
  if (c.mask && !c.mask->device().is_cuda())
    return fmt::format("attention: the fused kernels take a CUDA mask ({})", shapes_of(c));
  return attention_unsupported(signature_of(c));
}

std::string attention_unsupported(const graph::AttentionSignature& c) {
  return attention_unsupported(c, device_shared_budget());
}

std::string attention_unsupported(const graph::AttentionSignature& c, std::int64_t shared_budget) {
  auto fail = [&](const std::string& what) {
    return fmt::format("attention: {} ({})", what, shapes_of(c));
  };
  if (c.q.size() < 2 || c.k.size() < 2 || c.v.size() < 2)
    return fail("q, k and v need rank 2 or more");
  if (c.q_dtype != c.k_dtype || c.q_dtype != c.v_dtype)
    return fail("q, k and v must share a dtype");
  DType t = c.q_dtype;
  if (!is_floating(t)) return fail("q, k and v must be floating point");
  if (t == DType::f64) return fail("no f64 kernel (f64 runs the decomposition)");
  std::int64_t d = c.q.back(), dv = c.v.back();
  if (c.k.back() != d) return fail("q and k head dims differ");
  if (c.v[c.v.size() - 2] != c.k[c.k.size() - 2])
    return fail("k and v have different numbers of keys");
  for (auto h : {d, dv})
    if (h < kAttentionMinHeadDim || h > kAttentionMaxHeadDim)
      return fail(fmt::format("head dim {} is outside the kernels' range [{}, {}]", h,
                              kAttentionMinHeadDim, kAttentionMaxHeadDim));
  for (Kernel kind : {Kernel::forward, Kernel::backward}) {
    int elem = static_cast<int>(itemsize(t)), pd = padded(static_cast<int>(d)),
        pdv = padded(static_cast<int>(dv));
    if (!fitting_tiling(kind, elem, pd, pdv, shared_budget))
      return fail(fmt::format(
          "no {} tiling fits head dims {} and {} at {}: the smallest needs {} bytes of shared "
          "memory per block, the device allows {}",
          kind == Kernel::forward ? "forward" : "backward", d, dv, dtype_name(t),
          smallest_shared(kind, elem, pd, pdv), shared_budget));
  }
  Shape batch;
  try {
    batch = batch_shape(c.q, c.k, c.v);
  } catch (const Error& e) {
    return fail(e.what());
  }
  if (c.mask) {
    DType m = *c.mask_dtype;
    if (m != DType::bool_ && !is_floating(m)) return fail("the mask must be bool or floating");
    Shape full = batch;
    full.push_back(c.q[c.q.size() - 2]);
    full.push_back(c.k[c.k.size() - 2]);
    bool fits = c.mask->size() <= full.size();
    for (std::size_t i = 1; fits && i <= c.mask->size(); ++i) {
      auto ms = (*c.mask)[c.mask->size() - i];
      fits = ms == 1 || ms == full[full.size() - i];
    }
    if (!fits) return fail(fmt::format("the mask does not broadcast to {}", shape_str(full)));
  }
  if (!(c.scale > 0 || c.scale < 0) || !std::isfinite(c.scale))
    return fail(fmt::format("scale {} is not a finite nonzero number", c.scale));
  return "";
}

std::string attention_tiles_note(DType dtype, int head_qk, int head_v, bool backward) {
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16) return "";
  if (std::min(head_qk, head_v) < kAttentionMinHeadDim ||
      std::max(head_qk, head_v) > kAttentionMaxHeadDim)
    return "";
  auto t = fitting_tiling(backward ? Kernel::backward : Kernel::forward,
                          static_cast<int>(itemsize(dtype)), padded(head_qk), padded(head_v),
                          device_shared_budget());
  return t ? fmt::format("tiles {}: {}", t->tag(), t->str()) : "";
}

// A checked call's sizes: the broadcast batch dims, the query and key lengths, the head dims,
// and the forward's output shapes (what the backward checks its out, dout and lse against).
struct Geometry {
  Shape batch;
  std::int64_t t, s;
  int d, dv;
  Shape out_shape, lse_shape;
};

Geometry geometry_of(const AttentionCall& c) {
  Geometry g;
  g.batch = batch_shape(c.q.shape(), c.k.shape(), c.v.shape());
  g.t = c.q.shape()[c.q.dim() - 2];
  g.s = c.k.shape()[c.k.dim() - 2];
  g.d = static_cast<int>(c.q.shape().back());
  g.dv = static_cast<int>(c.v.shape().back());
  g.out_shape = g.batch;
  g.out_shape.insert(g.out_shape.end(), {g.t, g.dv});
  g.lse_shape = g.batch;
  g.lse_shape.push_back(g.t);
  return g;
}

// The kernel variant of a call whose tensors have layout `l` (`vector_loads`: whether the rows
// the kernel streams take cp.async's 16-byte copies).
Variant variant_of(const AttentionCall& c, const Geometry& g, const Layout& l, bool vector_loads) {
  return {c.q.dtype(),
          g.d,
          g.dv,
          c.mask ? std::optional(c.mask->dtype()) : std::nullopt,
          vector_loads,
          l.rank,
          c.q.dtype() == DType::f32 && allow_tf32(),
          false,
          device_shared_budget(),
          c.dropout > 0};
}

// The kernels' dropout argument (kiln_attn_dropout): the draw and the f32 keep test and scale.
struct DropoutArgument {
  long long seed, offset;
  float threshold, scale;
};
DropoutArgument dropout_argument(const AttentionCall& c) {
  AttentionDropout d = attention_dropout(c.dropout, DType::f32);
  return {c.seed, c.offset, static_cast<float>(d.threshold), static_cast<float>(d.scale)};
}

AttentionForward attention_forward(const AttentionCall& c, const std::optional<Tensor>& out_into) {
  check(c);
  if (std::int64_t group = group_of(c); group > 1) {
    std::optional<Tensor> into;
    if (out_into) into = query_view(*out_into, group, 2);
    AttentionForward r = attention_forward(grouped_call(c, group), into);
    return {out_into ? *out_into : ungrouped(r.out, 2), ungrouped(r.lse, 1)};
  }
  Geometry g = geometry_of(c);
  const std::int64_t t = g.t;
  AttentionForward r{placed_output(out_into, "out", g.out_shape, c.q.dtype(), c),
                     empty(g.lse_shape, DType::f32, Device::cuda())};
  if (r.out.numel() == 0) return r;
  std::optional<Tensor> mask;
  if (c.mask) mask = mask_view(*c.mask, g.batch, t, g.s);
  Layout l = layout_of(c, g.batch, &r.out, nullptr, mask ? &*mask : nullptr);
  Variant v = variant_of(c, g, l, vector_loads_fit({&c.q, &c.k, &c.v}, c));
  auto [k, tl] = kernel_for(Kernel::forward, v);
  auto blocks = static_cast<unsigned>(l.batches * ((t + 16 * tl.warps - 1) / (16 * tl.warps)));
  cuda::DevicePtr pq = device_address(c.q), pk = device_address(c.k), pv = device_address(c.v),
                  pm = mask ? device_address(*mask) : 0, po = device_address(r.out),
                  pl = device_address(r.lse);
  float scale_log2 = static_cast<float>(c.scale * M_LOG2E);
  int causal = c.causal ? 1 : 0;
  DropoutArgument dropout = dropout_argument(c);
  void* params[] = {&pq, &pk, &pv, &pm, &po, &pl, l.words.data(), &scale_log2, &causal, &dropout};
  std::int64_t read = tensor_bytes(c.q) + tensor_bytes(c.k) + tensor_bytes(c.v) +
                      (mask ? tensor_bytes(*c.mask) : 0);
  k->launch({blocks, 1, 1}, {static_cast<unsigned>(32 * tl.warps), 1, 1},
            static_cast<unsigned>(tl.shared), params, read,
            tensor_bytes(r.out) + tensor_bytes(r.lse));
  return r;
}

AttentionGrads attention_backward(const AttentionCall& c, const Tensor& out, const Tensor& lse,
                                  const Tensor& dout, const AttentionGradsInto& into) {
  check(c);
  if (std::int64_t group = group_of(c); group > 1) {
    // Every gradient where it was placed: dk and dv summed over each group by the dk/dv blocks
    // themselves, written through the grouped view (a size-1 dim, a view of any layout).
    AttentionGradsInto grouped_into;
    if (into.dq) grouped_into.dq = query_view(*into.dq, group, 2);
    if (into.dk) grouped_into.dk = into.dk->reshape(grouped_kv_shape(into.dk->shape(), 2));
    if (into.dv) grouped_into.dv = into.dv->reshape(grouped_kv_shape(into.dv->shape(), 2));
    AttentionGrads r =
        attention_backward(grouped_call(c, group), query_view(out, group, 2),
                           query_view(lse, group, 1), query_view(dout, group, 2), grouped_into);
    auto back = [](const Tensor& grad, const Tensor& like, const std::optional<Tensor>& placed) {
      return placed ? *placed : grad.reshape(like.shape());
    };
    return {back(r.dq, c.q, into.dq), back(r.dk, c.k, into.dk), back(r.dv, c.v, into.dv)};
  }
  Geometry g = geometry_of(c);
  const Shape &batch = g.batch, &out_shape = g.out_shape, &lse_shape = g.lse_shape;
  const std::int64_t t = g.t, s = g.s;
  const int d = g.d, dv = g.dv;
  require_tensor(out, "attention_backward: out", out_shape, c.q.dtype(), c);
  require_tensor(dout, "attention_backward: dout", out_shape, c.q.dtype(), c);
  require_tensor(lse, "attention_backward: lse", lse_shape, DType::f32, c);
  // k and v broadcast along the innermost batch dim (multi-query attention, or grouped queries
  // viewed [.., Hkv, g]): the dk/dv blocks sum its query rows, so dk and dv are written once.
  const std::int64_t kv_group = kv_group_of(c, batch);
  Shape dq_shape = batch, dk_shape = batch, dv_shape = batch;
  if (kv_group > 1) dk_shape.back() = dv_shape.back() = 1;
  dq_shape.insert(dq_shape.end(), {t, d});
  dk_shape.insert(dk_shape.end(), {s, d});
  dv_shape.insert(dv_shape.end(), {s, dv});
  // A placed gradient is the operand's own: one that broadcasts is summed into a new tensor.
  KILN_CHECK(!into.dq || dq_shape == c.q.shape(),
             "attention_backward: dq placed for q {}, which "
             "broadcasts to {} ({})",
             shape_str(c.q.shape()), shape_str(dq_shape), shapes_of(c));
  KILN_CHECK((!into.dk || dk_shape == c.k.shape()) && (!into.dv || dv_shape == c.v.shape()),
             "attention_backward: dk or dv placed for k or v that broadcast ({})", shapes_of(c));
  Tensor dq = placed_output(into.dq, "dq", dq_shape, c.q.dtype(), c);
  Tensor dk = placed_output(into.dk, "dk", dk_shape, c.q.dtype(), c);
  Tensor dvt = placed_output(into.dv, "dv", dv_shape, c.q.dtype(), c);
  if (s == 0 && dq.numel() > 0) dq.zero_();  // no keys: nothing flows to q
  if (t == 0 && dk.numel() > 0) {
    dk.zero_();
    dvt.zero_();
  }
  if (dq.numel() > 0 && dk.numel() > 0) {
    std::optional<Tensor> mask;
    if (c.mask) mask = mask_view(*c.mask, batch, t, s);
    Tensor lse_c = lse.contiguous();
    AttentionGrads grads{dq, dk, dvt};
    Layout l = layout_of(c, batch, &out, &dout, mask ? &*mask : nullptr, &grads);
    Variant v = variant_of(c, g, l, vector_loads_fit({&c.q, &c.k, &c.v, &dout}, c));
    v.grouped = kv_group > 1;
    cuda::DevicePtr pq = device_address(c.q), pk = device_address(c.k), pv = device_address(c.v),
                    po = device_address(out), pdo = device_address(dout),
                    pl = device_address(lse_c), pm = mask ? device_address(*mask) : 0,
                    pdq = device_address(dq), pdk = device_address(dk), pdv = device_address(dvt);
    float scale_log2 = static_cast<float>(c.scale * M_LOG2E), scale = static_cast<float>(c.scale);
    int causal = c.causal ? 1 : 0;
    // One launch: the dq blocks first, then the dk/dv blocks.
    auto [k, tl] = kernel_for(Kernel::backward, v);
    long long rows = 16 * tl.warps;
    long long q_blocks = l.batches * ((t + rows - 1) / rows);
    long long group = kv_group;
    long long kv_blocks = l.batches / group * ((s + rows - 1) / rows);
    DropoutArgument dropout = dropout_argument(c);
    void* params[] = {&pq,    &pk,     &pv,       &po,    &pdo,           &pl,
                      &pm,    &pdq,    &pdk,      &pdv,   l.words.data(), &scale_log2,
                      &scale, &causal, &q_blocks, &group, &dropout};
    k->launch({static_cast<unsigned>(q_blocks + kv_blocks), 1, 1},
              {static_cast<unsigned>(32 * tl.warps), 1, 1}, static_cast<unsigned>(tl.shared),
              params,
              tensor_bytes(c.q) + tensor_bytes(c.k) + tensor_bytes(c.v) +
                  (mask ? tensor_bytes(*c.mask) : 0) + tensor_bytes(out) + tensor_bytes(dout) +
                  tensor_bytes(lse_c),
              tensor_bytes(dq) + tensor_bytes(dk) + tensor_bytes(dvt));
  }
  return {reduce_to(dq, c.q.shape()), reduce_to(dk, c.k.shape()), reduce_to(dvt, c.v.shape())};
}

std::vector<Tensor> run_fused_attention(OpId op, const AttentionCall& call,
                                        std::span<const Tensor> inputs) {
  if (op == OpId::attention) {
    auto r = attention_forward(call);
    return {r.out, r.lse};
  }
  auto g = attention_backward(call, inputs[3], inputs[4], inputs[5]);
  return {g.dq, g.dk, g.dv};
}

namespace {

// What the attention rewrite asks before it replaces a match (graph/attention_rewrite.h).
class FusedAttentionKernels final : public graph::AttentionKernels {
 public:
  std::optional<std::string> refusal(const graph::AttentionSignature& call) const override {
    std::string why = attention_unsupported(call);
    return why.empty() ? std::nullopt : std::optional(why);
  }
};

[[maybe_unused]] const bool kernels_registered = [] {
  static const FusedAttentionKernels kernels;
  graph::set_attention_kernels(&kernels);
  return true;
}();

}  // namespace

}  // namespace kiln::jit::codegen
