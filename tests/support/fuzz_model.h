// The training fuzzer's random models: a stack of up to a dozen layers over a hidden state
// h [batch, seq, dim], drawn from a seed. Layers are what models are made of (linear layers with
// bias and activation, matmuls, layer/RMS norms, embeddings, gathers, cat/slice/pad/expand data
// movement, attention in every head layout, with and without masks), some in `jit::checkpoint`
// regions, the whole model sometimes under autocast(bf16). A model is run by plain calls to kiln
// ops, so the same code runs eagerly on the CPU in f64 and compiled on the CUDA device.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "jit/checkpoint.h"

namespace kiln::test {

enum class Layer {
  linear,            // linear(h, W, b?, act): the cuBLASLt epilogue path
  feed_forward,      // linear(gelu_tanh(linear(h))) through 2 * dim
  matmul_silu,       // silu(matmul(h, W))
  scale_tanh,        // tanh(h * w) * w2, w [dim]
  layer_norm,        // layer_norm over dim, affine or not
  rms_norm,          // rms_norm(h, {dim}, w)
  rms_norm_written,  // h * rsqrt(mean(h * h) + eps) * w
  embedding_add,     // h + embedding(E, ids)
  gather,            // gather(h, 2, index) (index random in [0, dim))
  cat_rotate,      // cat(h[..., k:], h[..., :k]) along dim or seq, or of h[..., ::2], h[..., 1::2]
  cat_project,     // matmul(cat(h, tanh(h)), W [2 dim, dim])
  slice_pad,       // pad(h[..., s:e], s, dim - e): zeros outside [s, e)
  shift_pad,       // pad(h, seq: 1 before, crop 1 after): a causal shift along seq
  expand_reshape,  // h[..., :dim/2] repeated by unsqueeze + expand + reshape
  attention,       // q, k, v projections, heads, GQA by expand + reshape, output projection
  count
};

enum class MaskKind { none, causal, keep, additive, count };

struct LayerSpec {
  Layer layer;
  int variant;        // the layer's own choice (activation, axis, offsets, ...)
  bool residual;      // h + layer(h) instead of layer(h)
  bool checkpointed;  // run inside jit::checkpoint
  // Attention only: heads of q and of k/v, the mask, and whether it is written as
  // matmul/softmax/matmul (the rewrite turns it into the attention op) or called as sdpa.
  // head_dim 16 is the fused kernels' smallest; the model's own dim / heads is below it.
  int heads = 0, kv_heads = 0, head_dim = 0;
  MaskKind mask = MaskKind::none;
  bool written = false;
};

struct Model {
  std::int64_t batch = 0, seq = 0, dim = 0;
  std::int64_t vocab = 5;
  bool autocast = false;
  std::vector<LayerSpec> layers;
};

inline bool linear_variant_has_relu(int variant) {
  return variant / 2 % 3 == 1;
}

// A model from `seed`. Shapes come from a small set, so that identical kernels recur across
// models and the kernel cache serves them; under autocast no layer has a kink (relu), since
// bf16 rounding moves values across it and the gradient then differs by O(1) at that element.
inline Model random_model(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
  Model m;
  const std::int64_t batch_seq[][2] = {{2, 3}, {1, 4}, {2, 4}};
  int bs = pick(3);
  m.batch = batch_seq[bs][0];
  m.seq = batch_seq[bs][1];
  m.dim = pick(2) ? 8 : 4;
  m.autocast = pick(4) == 0;
  int n_layers = 1 + pick(6);
  for (int i = 0; i < n_layers; ++i) {
    LayerSpec s{};
    // Attention, the layer with the most variants, is drawn twice as often as the others.
    int drawn = pick(static_cast<int>(Layer::count) + 1);
    s.layer =
        drawn == static_cast<int>(Layer::count) ? Layer::attention : static_cast<Layer>(drawn);
    s.variant = pick(12);
    s.residual = pick(2);
    s.checkpointed = pick(5) == 0;
    if (s.layer == Layer::attention) {
      s.heads = m.dim == 8 && pick(2) ? 4 : 2;
      const int kv_choices[] = {s.heads, s.heads / 2, 1};
      s.kv_heads = kv_choices[pick(3)];
      s.head_dim = pick(2) ? 16 : static_cast<int>(m.dim) / s.heads;
      s.mask = static_cast<MaskKind>(pick(static_cast<int>(MaskKind::count)));
      s.written = pick(2);
      s.residual = true;
    }
    if (m.autocast && s.layer == Layer::linear && linear_variant_has_relu(s.variant))
      s.variant = (s.variant + 2) % 12;  // gelu_tanh instead
    // Layers that can leave a row with one degree of freedom (one value kept by a slice, one
    // element gathered four times, one positive relu) are residual: a norm of such a row has an
    // input gradient of ~eps / variance, cancellation in any precision, not a test of kiln.
    if (s.layer == Layer::slice_pad || s.layer == Layer::gather ||
        (s.layer == Layer::linear && linear_variant_has_relu(s.variant)))
      s.residual = true;
    m.layers.push_back(s);
  }
  return m;
}

// What a model reads: its parameters (in the order model_parameter_shapes gives) and its data.
struct ModelData {
  Tensor x;            // [batch, seq, dim], floating; differentiated like a parameter
  Tensor ids;          // [batch, seq] i64 in [0, vocab)
  Tensor index;        // [batch, seq, dim] i64 in [0, dim)
  Tensor keep;         // [seq, seq] bool: the diagonal and random others (never a fully masked row)
  Tensor causal_keep;  // [seq, seq] bool lower triangle
  Tensor additive;     // [seq, seq] floating, O(1)
};

struct ParameterShape {
  std::size_t layer;
  std::string name;
  Shape shape;
};

inline std::vector<ParameterShape> model_parameter_shapes(const Model& m) {
  std::vector<ParameterShape> out;
  const std::int64_t d = m.dim;
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    const LayerSpec& s = m.layers[i];
    auto add = [&](const char* what, Shape shape) {
      out.push_back({i, fmt::format("layer{}.{}", i, what), std::move(shape)});
    };
    switch (s.layer) {
      case Layer::linear:
        add("weight", {d, d});
        if (s.variant % 2 == 0) add("bias", {d});
        break;
      case Layer::feed_forward:
        add("w1", {2 * d, d}), add("b1", {2 * d}), add("w2", {d, 2 * d}), add("b2", {d});
        break;
      case Layer::matmul_silu:
        add("weight", {d, d});
        break;
      case Layer::scale_tanh:
        add("w", {d}), add("w2", {d});
        break;
      case Layer::layer_norm:
        if (s.variant % 2 == 0) add("weight", {d}), add("bias", {d});
        break;
      case Layer::rms_norm:
      case Layer::rms_norm_written:
        add("weight", {d});
        break;
      case Layer::embedding_add:
        add("table", {m.vocab, d});
        break;
      case Layer::cat_project:
        add("weight", {2 * d, d});
        break;
      case Layer::expand_reshape:
        add("w", {d});
        break;
      case Layer::attention: {
        add("wq", {s.heads * s.head_dim, d}), add("wk", {s.kv_heads * s.head_dim, d});
        add("wv", {s.kv_heads * s.head_dim, d}), add("wo", {d, s.heads * s.head_dim});
        break;
      }
      default:
        break;
    }
  }
  return out;
}

namespace detail {

// A linear layer's variant: bias when even, the activation from variant / 2.
inline Activation linear_activation(int variant) {
  const Activation acts[] = {Activation::none, Activation::relu, Activation::gelu_tanh};
  return acts[variant / 2 % 3];
}

// [b, s, heads * head_dim] -> [b, heads, s, head_dim]
inline Tensor split_heads(const Tensor& t, const Model& m, std::int64_t heads) {
  return reshape(t, {m.batch, m.seq, heads, -1}).transpose(1, 2);
}

inline Tensor attention_layer(const Model& m, const LayerSpec& s, const Tensor& h, const Tensor* p,
                              const ModelData& data) {
  const std::int64_t head_dim = s.head_dim, group = s.heads / s.kv_heads;
  // Pre-norm under autocast (and in half the f32 models), as transformers are: scores of a
  // growing residual stream make a peaked softmax, whose gradient bf16 rounding swamps.
  Tensor x = m.autocast || s.variant % 2 == 1 ? rms_norm(h, {m.dim}) : h;
  Tensor q = split_heads(matmul(x, p[0].t()), m, s.heads);
  Tensor k = split_heads(matmul(x, p[1].t()), m, s.kv_heads);
  Tensor v = split_heads(matmul(x, p[2].t()), m, s.kv_heads);
  if (group > 1) {  // grouped-query attention: each k/v head serves `group` query heads
    SymShape grouped{m.batch, s.kv_heads, group, m.seq, head_dim};
    SymShape merged{m.batch, s.heads, m.seq, head_dim};
    k = reshape(expand(unsqueeze(k, 2), grouped), merged);
    v = reshape(expand(unsqueeze(v, 2), grouped), merged);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  Tensor o;
  if (!s.written) {
    Tensor mask = s.mask == MaskKind::keep       ? data.keep
                  : s.mask == MaskKind::additive ? data.additive
                                                 : Tensor();
    o = scaled_dot_product_attention(q, k, v, mask, s.mask == MaskKind::causal);
  } else {
    Tensor scores = matmul(q, k.transpose(-2, -1)) * scale;
    if (s.mask == MaskKind::causal) scores = where(data.causal_keep, scores, -INFINITY);
    if (s.mask == MaskKind::keep) scores = where(data.keep, scores, -INFINITY);
    if (s.mask == MaskKind::additive) scores = scores + data.additive;
    o = matmul(softmax(scores, -1), v);
  }
  o = reshape(o.transpose(1, 2), {m.batch, m.seq, s.heads * head_dim});
  return matmul(o, p[3].t());
}

// One layer's output (before the residual), reading its parameters from `p`.
inline Tensor layer_output(const Model& m, const LayerSpec& s, const Tensor& h, const Tensor* p,
                           const ModelData& data) {
  const std::int64_t d = m.dim;
  switch (s.layer) {
    case Layer::linear:
      return linear(h, p[0], s.variant % 2 == 0 ? p[1] : Tensor(), linear_activation(s.variant));
    case Layer::feed_forward:
      return feed_forward(h, p[0], p[1], p[2], p[3], Activation::gelu_tanh);
    case Layer::matmul_silu:
      return silu(matmul(h, p[0]));
    case Layer::scale_tanh:
      return tanh(h * p[0]) * p[1];
    case Layer::layer_norm:
      return s.variant % 2 == 0 ? layer_norm(h, {d}, p[0], p[1]) : layer_norm(h, {d});
    case Layer::rms_norm:
      return rms_norm(h, {d}, p[0], 1e-6);
    case Layer::rms_norm_written:
      return h * rsqrt(mean(h * h, {-1}, true) + 1e-6) * p[0];
    case Layer::embedding_add:
      return h + embedding(p[0], data.ids);
    case Layer::gather:
      return gather(h, 2, data.index);
    case Layer::cat_rotate: {
      if (s.variant % 4 == 3)  // even then odd features: slices with a step
        return cat({slice(h, 2, 0, d, 2), slice(h, 2, 1, d, 2)}, 2);
      std::int64_t dim = s.variant % 2 == 0 ? 2 : 1, n = dim == 2 ? d : m.seq;
      std::int64_t k = 1 + s.variant / 2 % (n - 1);
      return cat({slice(h, dim, k, n), slice(h, dim, 0, k)}, dim);
    }
    case Layer::cat_project:
      return matmul(cat({h, tanh(h)}, 2), p[0]);
    case Layer::slice_pad: {
      std::int64_t start = 1 + s.variant % (d / 2), end = d - s.variant / 6;  // start > d - end
      if (end - start < 1) end = start + 1;
      return pad(slice(h, 2, start, end), {start, d - end});
    }
    case Layer::shift_pad:
      return s.variant % 2 == 0 ? pad(h, {0, 0, 1, -1}) : pad(h, {0, 0, -1, 1}, 0.5);
    case Layer::expand_reshape: {
      Tensor half = slice(h, 2, 0, d / 2);
      Tensor rep =
          s.variant % 2 == 0
              ? reshape(expand(unsqueeze(half, 3), {m.batch, m.seq, d / 2, 2}), {m.batch, m.seq, d})
              : reshape(expand(unsqueeze(half, 2), {m.batch, m.seq, 2, d / 2}),
                        {m.batch, m.seq, d});
      return rep * p[0];
    }
    case Layer::attention:
      return attention_layer(m, s, h, p, data);
    case Layer::count:
      break;
  }
  return h;
}

}  // namespace detail

// The model's output [batch, seq, dim]: `params` in model_parameter_shapes order.
inline Tensor run_model(const Model& m, const std::vector<Tensor>& params, const ModelData& data) {
  auto shapes = model_parameter_shapes(m);
  Tensor h = data.x;
  std::size_t next = 0;
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    const LayerSpec& s = m.layers[i];
    const Tensor* p = params.data() + next;
    while (next < shapes.size() && shapes[next].layer == i) ++next;
    auto body = [&](const Tensor& a) {
      Tensor y = detail::layer_output(m, s, a, p, data);
      return s.residual ? a + y : y;
    };
    h = s.checkpointed ? jit::checkpoint(body, h) : body(h);
  }
  return h;
}

inline const char* layer_name(Layer l) {
  static const char* names[] = {"linear",     "feed_forward",   "matmul_silu",      "scale_tanh",
                                "layer_norm", "rms_norm",       "rms_norm_written", "embedding_add",
                                "gather",     "cat_rotate",     "cat_project",      "slice_pad",
                                "shift_pad",  "expand_reshape", "attention"};
  return names[static_cast<int>(l)];
}

inline std::string describe(const Model& m) {
  static const char* masks[] = {"none", "causal", "keep (bool)", "additive"};
  std::string s = fmt::format("h [batch {}, seq {}, dim {}]{}\n", m.batch, m.seq, m.dim,
                              m.autocast ? ", whole model under autocast(bf16)" : "");
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    const LayerSpec& l = m.layers[i];
    s += fmt::format("  layer{}: h = {}{}(h) variant {}", i, l.residual ? "h + " : "",
                     layer_name(l.layer), l.variant);
    if (l.layer == Layer::attention)
      s += fmt::format(" [{} heads of {}, {} kv heads, mask {}, {}]", l.heads, l.head_dim,
                       l.kv_heads, masks[static_cast<int>(l.mask)],
                       l.written ? "written matmul/softmax/matmul" : "sdpa");
    if (l.checkpointed) s += " in jit::checkpoint";
    s += "\n";
  }
  return s;
}

}  // namespace kiln::test
