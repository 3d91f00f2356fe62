// Matching traced attention and replacing it by one `attention` node (see attention_rewrite.h).
#include "graph/attention_rewrite.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <optional>

#include "graph/rewrite.h"
#include "graph/sym_shapes.h"
#include "runtime/log.h"

namespace kiln::graph {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Dropout of the probabilities as the dropout composite traces: P * cast(ge(U, p)) * scale, U a
// random_uniform node of P's shape.
struct ProbabilityDropout {
  int random = -1;             // the random_uniform node
  double rate = 0;             // p, as the graph compares with it
  int seed = -1, offset = -1;  // the draw's inputs
};

struct Match {
  int softmax = -1;
  int result = -1;              // the second matmul's value
  int q = -1, kt = -1, v = -1;  // values; kt is the first matmul's right operand
  int mask = -1;
  std::optional<ProbabilityDropout> dropout;
  bool negate_mask = false;  // where(mask, -inf, scores): the mask names what is dropped
  bool additive_mask = false;
  double scale = 1.0;
  std::vector<std::string> steps;  // forward order
};

// What the walk back from the softmax's input to the first matmul found.
struct BackWalk {
  std::vector<int> chain;          // values from the softmax's input back to the scores
  std::vector<std::string> steps;  // back to front
  std::string stop;                // why the walk stopped short of a matmul
  bool mask_seen = false, scale_seen = false, scale_after_mask = false, additive = false;
};

// What the walk forward from the softmax's output to the second matmul found.
struct ForwardWalk {
  std::vector<int> probs;  // the softmax's output, after any dropout, and its cast
  int second = -1;         // the second matmul's node
  std::optional<ProbabilityDropout> dropout;
  std::string stop;
};

class Matcher {
 public:
  explicit Matcher(const Graph& g) : g_(g), readers_(g) {}

  // The match rooted at softmax node `s`; nullopt with `why` set for a near miss, or with `why`
  // empty when the softmax is not part of anything attention-like.
  std::optional<Match> match(int s, std::string& why) const {
    const Node& sm = g_.nodes[s];
    Match m;
    m.softmax = s;
    BackWalk back = walk_to_scores(sm.inputs[0], m);
    ForwardWalk fwd = walk_to_second_matmul(sm.output());
    // Not attention-like at all: no report.
    if (m.q < 0 && fwd.second < 0) return std::nullopt;
    if (!back.stop.empty()) return miss(why, back.stop);
    if (!fwd.stop.empty()) return miss(why, fwd.stop);
    if (m.q < 0 || fwd.second < 0) return miss(why, "no matmul on one side of the softmax");
    std::int64_t rank = static_cast<std::int64_t>(g_.values[sm.inputs[0]].meta.shape.size());
    if (normalize_dim(sm.attrs.dim, rank, "softmax") != rank - 1)
      return miss(why, fmt::format("the softmax is over dim {}, not the last", sm.attrs.dim));
    // The scores (the first matmul's result) through the softmax's input: read by the next
    // step only.
    back.chain.push_back(g_.nodes[g_.values[back.chain.back()].producer].output());
    for (int v : back.chain)
      if (readers_.sole_reader(v) < 0) return miss(why, "the scores are read elsewhere too");
    m.result = g_.nodes[fwd.second].output();
    m.v = g_.nodes[fwd.second].inputs[1];
    m.dropout = fwd.dropout;
    if (std::string reason = unfusable(m, back, fwd); !reason.empty()) return miss(why, reason);
    // Back to front -> forward order.
    m.steps.assign(back.steps.rbegin(), back.steps.rend());
    m.steps.push_back("softmax");
    if (fwd.dropout) m.steps.push_back("dropout");
    if (fwd.probs.size() > 1) m.steps.push_back("cast");
    m.steps.push_back("matmul");
    return m;
  }

 private:
  BackWalk walk_to_scores(int cur, Match& m) const {
    BackWalk w;
    for (;;) {
      w.chain.push_back(cur);
      // A factor or mask that broadcast the scores to a larger shape: not attention's.
      if (w.chain.size() >= 2 &&
          g_.values[cur].meta.shape != g_.values[w.chain[w.chain.size() - 2]].meta.shape) {
        w.stop = "a factor or mask broadcasts the scores to a larger shape";
        return w;
      }
      const Node* p = producer_of(g_, cur);
      if (!p) {
        w.stop = "the softmax's input is not computed from a matmul";
        return w;
      }
      if (p->op == OpId::matmul) {
        m.q = p->inputs[0];
        m.kt = p->inputs[1];
        w.steps.push_back("matmul");
        return w;
      }
      if (p->op == OpId::cast) {
        w.steps.push_back("cast");
        cur = p->inputs[0];
      } else if (p->op == OpId::mul || p->op == OpId::div) {
        cur = step_scale(*p, cur, w, m);
      } else if (p->op == OpId::where || p->op == OpId::add) {
        cur = step_mask(*p, cur, w, m);
      } else {
        w.stop = fmt::format("{} between the first matmul and the softmax", p->op);
      }
      if (!w.stop.empty()) return w;
    }
  }

  // Past a scaling of the scores by a constant; returns the scaled value.
  int step_scale(const Node& p, int cur, BackWalk& w, Match& m) const {
    int factor_at = p.op == OpId::div ? 1 : (constant_scalar(p.inputs[1]) ? 1 : 0);
    auto c = constant_scalar(p.inputs[factor_at]);
    if (!c) {
      w.stop = fmt::format("{} %{} is not by a constant factor", p.op, g_.values[cur].producer);
      return cur;
    }
    if (w.scale_seen) {
      w.stop = "two scalings of the scores";
      return cur;
    }
    w.scale_seen = true;
    m.scale = p.op == OpId::div ? 1.0 / *c : *c;
    w.steps.push_back(p.op == OpId::div ? "div" : "mul");
    return p.inputs[1 - factor_at];
  }

  // Past a mask: where(mask, -inf, ·), where(keep, ·, -inf) or an additive mask; returns the
  // masked value.
  int step_mask(const Node& p, int cur, BackWalk& w, Match& m) const {
    if (w.mask_seen) {
      w.stop = "two masks on the scores";
      return cur;
    }
    w.mask_seen = true;
    w.scale_after_mask = w.scale_seen;  // walking back, a scale met first is applied after
    if (p.op == OpId::where) {
      const DType t = g_.values[cur].meta.dtype;
      auto a = constant_scalar(p.inputs[1]), b = constant_scalar(p.inputs[2]);
      if (!(a && drops(*a, t)) && !(b && drops(*b, t))) {
        w.stop = fmt::format(
            "the masked scores are filled with {}, not -inf or at most {}'s lowest finite value",
            a   ? *a
            : b ? *b
                : 0.0,
            t);
        return cur;
      }
      m.negate_mask = a && drops(*a, t);
      m.mask = p.inputs[0];
      w.steps.push_back("where");
      return m.negate_mask ? p.inputs[2] : p.inputs[1];
    }
    w.additive = true;
    m.additive_mask = true;
    const Value& out = g_.values[cur];
    int first = p.inputs[0], second = p.inputs[1];
    bool first_is_scores = producer_of(g_, first) &&
                           g_.values[first].meta.shape == out.meta.shape &&
                           scores_like(producer_of(g_, first)->op);
    m.mask = first_is_scores ? second : first;
    w.steps.push_back("add");
    return first_is_scores ? first : second;
  }

  ForwardWalk walk_to_second_matmul(int probs) const {
    ForwardWalk w;
    w.probs = {probs};
    for (int p = probs;;) {
      int r = readers_.sole_reader(p);
      if (r < 0) {
        w.stop = "the probabilities are read by more than the second matmul";
        return w;
      }
      const Node& n = g_.nodes[r];
      if (n.op == OpId::mul && w.probs.size() == 1 && !w.dropout) {
        std::string why;
        if (auto d = dropout_at(r, p, why)) {
          w.dropout = d;
          p = d->after;
          w.probs.back() = p;
          continue;
        }
        w.stop = fmt::format("mul between the softmax and the second matmul: {}", why);
        return w;
      }
      if (n.op == OpId::cast && w.probs.size() == 1) {
        p = n.output();
        w.probs.push_back(p);
        continue;
      }
      if (n.op == OpId::matmul && n.inputs[0] == p) {
        w.second = r;
        return w;
      }
      w.stop = fmt::format("{} between the softmax and the second matmul", n.op);
      return w;
    }
  }

  struct DropoutAt : ProbabilityDropout {
    int after = -1;  // the dropped probabilities' value
  };

  // dropout(P) at mul node `r` reading the probabilities `probs`: mul(mul(P, cast(ge(U, p))),
  // scale) with U a random_uniform of P's shape in the dtype dropout draws for P (f32; f64 for
  // f64), p and scale constants, scale = 1 / (1 - p) in P's dtype. Else nullopt and why.
  std::optional<DropoutAt> dropout_at(int r, int probs, std::string& why) const {
    const Node& first = g_.nodes[r];
    const DType t = g_.values[probs].meta.dtype;
    const int mask = first.inputs[0] == probs ? first.inputs[1] : first.inputs[0];
    const Node* cast = producer_of(g_, mask);
    const Node* ge = cast && cast->op == OpId::cast ? producer_of(g_, cast->inputs[0]) : nullptr;
    const Node* u = ge && ge->op == OpId::ge ? producer_of(g_, ge->inputs[0]) : nullptr;
    auto rate = ge ? constant_scalar(ge->inputs[1]) : std::nullopt;
    if (!u || u->op != OpId::random_uniform || !rate) {
      why = "not a factor the dropout of the probabilities makes";
      return std::nullopt;
    }
    DType drawn = t == DType::f64 ? DType::f64 : DType::f32;
    if (g_.values[u->output()].meta.dtype != drawn ||
        g_.values[u->output()].meta.shape != g_.values[probs].meta.shape) {
      why = "the dropout's uniforms are not of the probabilities' shape and f32";
      return std::nullopt;
    }
    int m1 = first.output(), second = readers_.sole_reader(m1);
    const Node* scale = second >= 0 ? &g_.nodes[second] : nullptr;
    auto factor =
        scale && scale->op == OpId::mul
            ? constant_scalar(scale->inputs[0] == m1 ? scale->inputs[1] : scale->inputs[0])
            : std::nullopt;
    double expected =
        t == DType::f64 ? 1.0 / (1.0 - *rate) : static_cast<float>(1.0 / (1.0 - *rate));
    if (!factor || *factor != expected || !(*rate > 0 && *rate < 1)) {
      why = "the dropped probabilities are not scaled by 1 / (1 - p)";
      return std::nullopt;
    }
    DropoutAt d;
    d.random = g_.values[u->output()].producer;
    d.rate = *rate;
    d.seed = u->inputs[0];
    d.offset = u->inputs[1];
    d.after = scale->output();
    return d;
  }

  // Why the one fused op cannot compute the matched chain (scale, dtypes, mask), or "".
  std::string unfusable(const Match& m, const BackWalk& back, const ForwardWalk& fwd) const {
    if (back.scale_seen && back.scale_after_mask && back.additive)
      return "the scale is applied after an additive mask (it would scale the mask)";
    if (back.scale_seen && back.scale_after_mask && !(m.scale > 0))
      return "a non-positive scale after a -inf mask";
    if (!std::isfinite(m.scale)) return "the scale is not finite";
    // dtypes: q, k, v share one floating dtype; the chain stays in it or in f32 for a half one.
    DType t = g_.values[m.q].meta.dtype;
    if (!is_floating(t) || g_.values[m.kt].meta.dtype != t || g_.values[m.v].meta.dtype != t)
      return "q, k and v do not share one floating dtype";
    for (int v : back.chain) {
      DType c = g_.values[v].meta.dtype;
      if (c != t && !(c == DType::f32 && (t == DType::f16 || t == DType::bf16)))
        return fmt::format("the scores change dtype to {}", c);
    }
    if (g_.values[fwd.probs.back()].meta.dtype != t ||
        g_.values[g_.nodes[fwd.second].output()].meta.dtype != t)
      return "the probabilities are not cast back to the inputs' dtype";
    if (m.mask >= 0) {
      DType md = g_.values[m.mask].meta.dtype;
      if (!back.additive && md != DType::bool_) return "the where's condition is not bool";
      if (back.additive && !is_floating(md)) return "the additive mask is not floating";
    }
    return "";
  }

  // A where's fill that drops a score: -inf, or at most the lowest finite value of the scores'
  // dtype (torch.finfo(dtype).min, which Hugging Face models write), whose exp underflows to 0
  // against any kept score as -inf's does.
  static bool drops(double fill, DType t) {
    if (fill == -kInf) return true;
    switch (t) {
      case DType::f16:
        return fill <= -65504.0;
      case DType::bf16:
        return fill <= -3.3895313892515355e38;
      case DType::f32:
        return fill <= static_cast<double>(std::numeric_limits<float>::lowest());
      case DType::f64:
        return fill <= std::numeric_limits<double>::lowest();
      default:
        return false;
    }
  }

  static bool scores_like(OpId op) {
    return op == OpId::matmul || op == OpId::mul || op == OpId::div || op == OpId::cast ||
           op == OpId::where;
  }

  // The value of a constant whose elements are all equal (through views, casts and transfers).
  std::optional<double> constant_scalar(int v) const {
    for (const Node* p = producer_of(g_, v); p; p = producer_of(g_, v)) {
      if (p->op != OpId::to_device && p->op != OpId::cast && p->op != OpId::expand &&
          p->op != OpId::reshape && p->op != OpId::detach)
        return std::nullopt;
      v = p->inputs[0];
    }
    const Input* in = g_.input_of(v);
    if (!in || in->kind != InputKind::constant || !in->tensor.defined() || in->tensor.numel() == 0)
      return std::nullopt;
    auto values = in->tensor.to_vector<double>();
    for (double x : values)
      if (!(x == values[0])) return std::nullopt;
    return values[0];
  }

  static std::nullopt_t miss(std::string& why, std::string reason) {
    why = std::move(reason);
    return std::nullopt;
  }

  const Graph& g_;
  Readers readers_;
};

// Every softmax's match, near misses reported and logged.
std::vector<Match> find_matches(const Graph& g, AttentionRewriteReport& report) {
  std::vector<Match> matches;
  Matcher matcher(g);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].op != OpId::softmax) continue;
    std::string why;
    if (auto m = matcher.match(static_cast<int>(i), why)) {
      matches.push_back(std::move(*m));
    } else if (!why.empty()) {
      report.near_misses.push_back({static_cast<int>(i), why});
      if (log_enabled(LogTopic::fusion))
        log_line(fmt::format("kiln: fusion: attention in '{}' not rewritten at softmax node {}: {}",
                             g.name, i, why));
    }
  }
  return matches;
}

// A value repeated over heads for grouped-query attention ([.., Hkv * g, T, D], kv head j's rows
// at heads j*g .. j*g+g-1), and its un-repeated form [.., Hkv, T, D].
struct Unrepeated {
  int value = -1;  // the un-repeated tensor, or its [.., Hkv, 1, T, D] form (needs_reshape)
  Shape shape;
  bool needs_reshape = false;
  std::int64_t kv_heads = 0;
};

// A constant's values (through device transfers and detach), or nullopt.
std::optional<std::vector<double>> constant_values(const Graph& g, int v) {
  for (const Node* p = producer_of(g, v); p; p = producer_of(g, v)) {
    if (p->op != OpId::to_device && p->op != OpId::detach) return std::nullopt;
    v = p->inputs[0];
  }
  const Input* in = g.input_of(v);
  if (!in || in->kind != InputKind::constant || !in->tensor.defined()) return std::nullopt;
  return in->tensor.to_vector<double>();
}

// reshape(expand(k [.., Hkv, 1, T, D] to [.., Hkv, g, T, D]) to [.., Hkv * g, T, D]), the
// unsqueeze being usually a reshape of k itself.
std::optional<Unrepeated> unrepeated_expand(const Graph& g, const Node& reshape, const Shape& xs) {
  const std::size_t r = xs.size();
  const Node* e = producer_of(g, reshape.inputs[0]);
  if (!e || e->op != OpId::expand) return std::nullopt;
  const Shape &es = g.values[reshape.inputs[0]].meta.shape, &bs = g.values[e->inputs[0]].meta.shape;
  if (es.size() != r + 1 || bs.size() != r + 1) return std::nullopt;
  for (std::size_t i = 0; i + 3 < r; ++i)
    if (es[i] != xs[i] || bs[i] != xs[i]) return std::nullopt;
  const std::int64_t kv = es[r - 3], group = es[r - 2];
  if (bs[r - 3] != kv || bs[r - 2] != 1 || group <= 1 || kv * group != xs[r - 3])
    return std::nullopt;
  for (std::size_t i = r - 1; i <= r; ++i)
    if (es[i] != xs[i - 1] || bs[i] != xs[i - 1]) return std::nullopt;
  Unrepeated u;
  u.kv_heads = kv;
  u.shape = xs;
  u.shape[r - 3] = kv;
  const Node* unsqueeze = producer_of(g, e->inputs[0]);
  if (unsqueeze && unsqueeze->op == OpId::reshape &&
      g.values[unsqueeze->inputs[0]].meta.shape == u.shape) {
    u.value = unsqueeze->inputs[0];
  } else {
    u.value = e->inputs[0];
    u.needs_reshape = true;
  }
  return u;
}

// index_select(k [.., Hkv, T, D], dim -3, index) with a constant index [0 .. 0, 1 .. 1, ...]
// (each head g times, repeat_interleave's order).
std::optional<Unrepeated> unrepeated_index(const Graph& g, const Node& sel, const Shape& xs) {
  const auto r = static_cast<std::int64_t>(xs.size());
  if (normalize_dim(sel.attrs.dim, r, "index_select") != r - 3) return std::nullopt;
  const Shape& src = g.values[sel.inputs[0]].meta.shape;
  const std::int64_t heads = xs[r - 3], kv = src[r - 3];
  if (kv <= 0 || heads % kv != 0 || heads == kv) return std::nullopt;
  auto index = constant_values(g, sel.inputs[1]);
  if (!index || static_cast<std::int64_t>(index->size()) != heads) return std::nullopt;
  for (std::int64_t h = 0; h < heads; ++h)
    if ((*index)[h] != static_cast<double>(h / (heads / kv))) return std::nullopt;
  return Unrepeated{sel.inputs[0], src, false, kv};
}

// k or v as a grouped-query attention user repeats it, un-repeated; nullopt for anything else.
std::optional<Unrepeated> unrepeated(const Graph& g, int x) {
  const Value& xv = g.values[x];
  if (xv.meta.shape.size() < 3 || xv.is_symbolic()) return std::nullopt;
  const Node* p = producer_of(g, x);
  if (!p) return std::nullopt;
  if (p->op == OpId::reshape) return unrepeated_expand(g, *p, xv.meta.shape);
  if (p->op == OpId::index_select) return unrepeated_index(g, *p, xv.meta.shape);
  return std::nullopt;
}

// The mask of `m` proven to be the causal triangle (key j visible to query i iff j <= i) of the
// scores' last two dims [T, S], in the form the match reads it: a constant whose values are
// checked here, once (nothing can change a constant after the trace), or tril(·, 0) / triu(·, 1)
// of an all-true constant. Captured and state tensors can be updated in place: never proven.
bool proven_causal(const Graph& g, const Match& m, std::int64_t t, std::int64_t s) {
  if (m.mask < 0 || t <= 0 || s <= 0 || g.values[m.mask].is_symbolic()) return false;
  const Shape& ms = g.values[m.mask].meta.shape;
  if (ms.size() < 2 || ms[ms.size() - 2] != t || ms.back() != s) return false;
  auto expected = [&](std::int64_t i, std::int64_t j) {
    bool visible = j <= i;
    if (m.additive_mask) return visible ? 0.0 : -kInf;
    return (m.negate_mask ? !visible : visible) ? 1.0 : 0.0;
  };
  if (auto values = constant_values(g, m.mask)) {
    for (std::size_t k = 0; k < values->size(); ++k) {
      auto at = static_cast<std::int64_t>(k);
      if ((*values)[k] != expected(at / s % t, at % s)) return false;
    }
    return !values->empty();
  }
  if (m.additive_mask) return false;
  int v = m.mask;
  const Node* p = producer_of(g, v);
  while (p && (p->op == OpId::to_device || p->op == OpId::detach))
    p = producer_of(g, v = p->inputs[0]);
  if (!p || g.values[p->inputs[0]].meta.shape != g.values[v].meta.shape) return false;
  const bool keeps = p->op == OpId::tril && p->attrs.diagonal == 0;
  const bool drops = p->op == OpId::triu && p->attrs.diagonal == 1;
  if (!(m.negate_mask ? drops : keeps)) return false;
  auto base = constant_values(g, p->inputs[0]);
  if (!base || g.values[p->inputs[0]].meta.dtype != DType::bool_) return false;
  for (double x : *base)
    if (x != 1.0) return false;
  return true;
}

// The attention node inserted for a match, or why none was.
struct Inserted {
  int value = -1;
  std::string why;
  bool grouped = false, causal = false;
};

// The kernels' refusal of the call `m` would make on a CUDA graph, or "".
std::string kernel_refusal(const Graph& g, const Match& m, const Shape& k, const Shape& v,
                           bool causal) {
  const AttentionKernels* kernels = attention_kernels();
  if (!kernels || !g.values[m.q].device.is_cuda()) return "";
  AttentionSignature call;
  call.q = g.values[m.q].meta.shape;
  call.k = k;
  call.v = v;
  call.q_dtype = g.values[m.q].meta.dtype;
  call.k_dtype = g.values[m.kt].meta.dtype;
  call.v_dtype = g.values[m.v].meta.dtype;
  if (m.mask >= 0 && !causal) {
    call.mask = g.values[m.mask].meta.shape;
    call.mask_dtype = g.values[m.mask].meta.dtype;
  }
  call.scale = m.scale;
  call.causal = causal;
  auto why = kernels->refusal(call);
  return why ? "the fused kernels refuse the call: " + *why : "";
}

// Inserts the attention node for `m` (and the views of its operands it needs) before the second
// matmul, whose value is `old`; inserts nothing when the kernels would refuse the call or the op
// would not give the matmul's shape and dtype.
Inserted insert_attention(Graph& g, const Match& m, int old) {
  const Node like = g.nodes[g.values[old].producer];
  std::vector<int> inserted;
  auto insert = [&](OpId op, std::vector<int> inputs, const OpAttrs& attrs) {
    inserted.push_back(
        insert_op_before(g, g.values[old].producer, op, std::move(inputs), attrs, like));
    return g.nodes[inserted.back()].output();
  };
  // k: the value kᵀ transposes (un-repeated when the heads were repeated for grouped-query
  // attention, and v with it), or a transposing view of the right operand.
  const Node* kt = producer_of(g, m.kt);
  const bool transposed = kt && kt->op == OpId::permute && swaps_last_two(kt->attrs.dims);
  const int k_repeated = transposed ? kt->inputs[0] : -1;
  std::optional<Unrepeated> uk, uv;
  if (transposed) uk = unrepeated(g, k_repeated);
  if (uk) uv = unrepeated(g, m.v);
  const bool grouped = uk && uv && uk->kv_heads == uv->kv_heads;
  Shape k_shape = g.values[m.kt].meta.shape;
  std::swap(k_shape[k_shape.size() - 1], k_shape[k_shape.size() - 2]);
  // A causal mask is the kernels' causal flag: no mask read, no tiles past the diagonal.
  const Shape& scores = g.values[g.nodes[m.softmax].inputs[0]].meta.shape;
  const bool causal = proven_causal(g, m, scores[scores.size() - 2], scores[scores.size() - 1]);
  std::string why = grouped ? kernel_refusal(g, m, uk->shape, uv->shape, causal)
                            : kernel_refusal(g, m, k_shape, g.values[m.v].meta.shape, causal);
  if (!why.empty()) return {-1, why, false, false};
  auto plain = [&](const Unrepeated& u) {
    OpAttrs attrs;
    attrs.shape = u.shape;
    return u.needs_reshape ? insert(OpId::reshape, {u.value}, attrs) : u.value;
  };
  int k = -1, v = m.v;
  if (grouped) {
    k = plain(*uk);
    v = plain(*uv);
  } else if (transposed) {
    k = k_repeated;
  } else {
    OpAttrs t;
    t.dims = last_two_swapped(g.values[m.kt].meta.shape.size());
    k = insert(OpId::permute, {m.kt}, t);
  }
  std::vector<int> inputs{m.q, k, v};
  // The op takes what attends: a dropped mask is negated, or un-negated where the user wrote
  // masked_fill(logical_not(keep), -inf).
  auto attending = [&](int dropped) {
    const Node* p = producer_of(g, dropped);
    return p && p->op == OpId::logical_not ? p->inputs[0]
                                           : insert(OpId::logical_not, {dropped}, {});
  };
  if (m.mask >= 0 && !causal) inputs.push_back(m.negate_mask ? attending(m.mask) : m.mask);
  OpAttrs attrs;
  attrs.scale = m.scale;
  attrs.causal = causal;
  if (m.dropout) {  // the op draws the same numbers in its kernels
    inputs.insert(inputs.end(), {m.dropout->seed, m.dropout->offset});
    attrs.dropout = m.dropout->rate;
  }
  int out = insert(OpId::attention, inputs, attrs);
  const Value &a = g.values[out], &b = g.values[old];
  if (a.meta.shape == b.meta.shape && a.meta.dtype == b.meta.dtype)
    return {out, "", grouped, causal};
  // The op's batch broadcasting disagrees with the matmuls': leave them.
  erase_nodes(g, inserted);
  return {-1, "the fused op's output shape differs", false, false};
}

std::atomic<const AttentionKernels*> registered_kernels{nullptr};

}  // namespace

void set_attention_kernels(const AttentionKernels* kernels) {
  registered_kernels.store(kernels, std::memory_order_release);
}
const AttentionKernels* attention_kernels() {
  return registered_kernels.load(std::memory_order_acquire);
}

AttentionRewriteReport rewrite_attention(Graph& g) {
  AttentionRewriteReport report;
  std::vector<Match> matches = find_matches(g, report);
  // All inserted first, then the matmuls' readers moved: an attention may read another's
  // result (its q), which the move then points at that attention too.
  std::vector<std::pair<int, int>> replaced;  // (old output, attention output)
  std::vector<std::string> patterns;
  for (const Match& m : matches) {
    Inserted in = insert_attention(g, m, m.result);
    if (in.value < 0) {
      report.near_misses.push_back({m.softmax, in.why});
      if (log_enabled(LogTopic::fusion))
        log_line(fmt::format("kiln: fusion: attention in '{}' not rewritten at softmax node {}: {}",
                             g.name, m.softmax, in.why));
      continue;
    }
    replaced.emplace_back(m.result, in.value);
    patterns.push_back(fmt::format("{}{}{}", fmt::join(m.steps, "."),
                                   in.grouped ? ", k and v un-repeated (grouped-query)" : "",
                                   in.causal ? ", the mask proven causal" : ""));
  }
  for (std::size_t r = 0; r < replaced.size(); ++r) {
    auto [old, out] = replaced[r];
    replace_all_uses(g, old, out);
    report.rewrites.push_back({patterns[r], out});
    if (log_enabled(LogTopic::fusion))
      log_line(fmt::format("kiln: fusion: attention in '{}' rewritten ({}) into %{}: {}", g.name,
                           patterns[r], out, shape_str(g.values[out].meta.shape)));
  }
  return report;
}

}  // namespace kiln::graph
