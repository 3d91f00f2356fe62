// Matching traced attention and replacing it by one `attention` node (see attention_rewrite.h).
#include "graph/attention_rewrite.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>
#include <optional>

#include "graph/passes.h"
#include "graph/sym_shapes.h"
#include "runtime/log.h"

namespace kiln::graph {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Match {
  int softmax = -1;
  int final_matmul = -1;        // node index
  int q = -1, kt = -1, v = -1;  // values; kt is the first matmul's right operand
  int mask = -1;
  bool negate_mask = false;  // where(mask, -inf, scores): the mask names what is dropped
  double scale = 1.0;
  std::vector<std::string> steps;  // forward order
};

class Matcher {
 public:
  explicit Matcher(const Graph& g) : g_(g), readers_(g.values.size(), 0) {
    for (const auto& n : g.nodes)
      for (int v : n.inputs) ++readers_[v];
    for (int v : g.outputs) readers_[v] += 2;  // a returned value is read outside the graph
  }

  // The match rooted at softmax node `s`; nullopt with `why` set for a near miss, or with `why`
  // empty when the softmax is not part of anything attention-like.
  std::optional<Match> match(int s, std::string& why) const {
    const Node& sm = g_.nodes[s];
    Match m;
    m.softmax = s;
    // ---- before the softmax: back to the first matmul ----
    std::vector<int> chain;  // values from the softmax's input back to the scores
    int cur = sm.inputs[0];
    bool mask_seen = false, scale_seen = false, scale_after_mask = false, additive = false;
    std::vector<std::string> back;
    std::string stop;
    for (;;) {
      chain.push_back(cur);
      // A factor or mask that broadcast the scores to a larger shape: not attention's.
      if (chain.size() >= 2 &&
          g_.values[cur].meta.shape != g_.values[chain[chain.size() - 2]].meta.shape) {
        stop = "a factor or mask broadcasts the scores to a larger shape";
        break;
      }
      const Node* p = producer(cur);
      if (!p) {
        stop = "the softmax's input is not computed from a matmul";
        break;
      }
      if (p->op == OpId::matmul) {
        m.q = p->inputs[0];
        m.kt = p->inputs[1];
        back.push_back("matmul");
        break;
      }
      if (p->op == OpId::cast) {
        back.push_back("cast");
        cur = p->inputs[0];
        continue;
      }

      if (p->op == OpId::mul || p->op == OpId::div) {
        int factor_at = p->op == OpId::div ? 1 : (constant_scalar(p->inputs[1]) ? 1 : 0);
        auto c = constant_scalar(p->inputs[factor_at]);
        if (!c) {
          stop = fmt::format("{} %{} is not by a constant factor", p->op, g_.values[cur].producer);
          break;
        }
        if (scale_seen) {
          stop = "two scalings of the scores";
          break;
        }
        scale_seen = true;
        m.scale = p->op == OpId::div ? 1.0 / *c : *c;
        back.push_back(p->op == OpId::div ? "div" : "mul");
        cur = p->inputs[1 - factor_at];
        continue;
      }
      if (p->op == OpId::where || p->op == OpId::add) {
        if (mask_seen) {
          stop = "two masks on the scores";
          break;
        }
        mask_seen = true;
        scale_after_mask = scale_seen;  // walking back, a scale met first is applied after
        if (p->op == OpId::where) {
          auto a = constant_scalar(p->inputs[1]), b = constant_scalar(p->inputs[2]);
          if (a && *a == -kInf) {
            m.negate_mask = true;
            cur = p->inputs[2];
          } else if (b && *b == -kInf) {
            cur = p->inputs[1];
          } else {
            stop = "the masked scores are filled with a value other than -inf";
            break;
          }
          m.mask = p->inputs[0];
          back.push_back("where");
        } else {
          additive = true;
          const Value& out = g_.values[cur];
          int first = p->inputs[0], second = p->inputs[1];
          bool first_is_scores = producer(first) && g_.values[first].meta.shape == out.meta.shape &&
                                 scores_like(producer(first)->op);
          cur = first_is_scores ? first : second;
          m.mask = first_is_scores ? second : first;
          back.push_back("add");
        }
        continue;
      }
      stop = fmt::format("{} between the first matmul and the softmax", p->op);
      break;
    }
    // ---- after the softmax: to the second matmul ----
    std::vector<int> after{sm.output()};
    int second = -1;
    std::string after_stop;
    for (int p = sm.output();;) {
      int r = sole_reader(p);
      if (r < 0) {
        after_stop = "the probabilities are read by more than the second matmul";
        break;
      }
      const Node& n = g_.nodes[r];
      if (n.op == OpId::cast && after.size() == 1) {
        p = n.output();
        after.push_back(p);
        continue;
      }
      if (n.op == OpId::matmul && n.inputs[0] == p) {
        second = r;
        break;
      }
      after_stop = fmt::format("{} between the softmax and the second matmul{}", n.op,
                               n.op == OpId::mul ? " (dropout?)" : "");
      break;
    }
    // Not attention-like at all: no report.
    if (m.q < 0 && second < 0) return std::nullopt;
    if (!stop.empty()) return miss(why, stop);
    if (!after_stop.empty()) return miss(why, after_stop);
    if (m.q < 0 || second < 0) return miss(why, "no matmul on one side of the softmax");
    std::int64_t rank = static_cast<std::int64_t>(g_.values[sm.inputs[0]].meta.shape.size());
    if (normalize_dim(sm.attrs.dim, rank, "softmax") != rank - 1)
      return miss(why, fmt::format("the softmax is over dim {}, not the last", sm.attrs.dim));
    // The scores (the first matmul's result) through the softmax's input, and the
    // probabilities: read by the next step only.
    int scores = g_.nodes[g_.values[chain.back()].producer].output();
    chain.push_back(scores);
    for (std::size_t i = 1; i < chain.size(); ++i)
      if (readers_[chain[i]] != 1) return miss(why, "the scores are read elsewhere too");
    if (readers_[chain[0]] != 1) return miss(why, "the scores are read elsewhere too");
    m.final_matmul = second;
    m.v = g_.nodes[second].inputs[1];
    if (scale_seen && scale_after_mask && additive)
      return miss(why, "the scale is applied after an additive mask (it would scale the mask)");
    if (scale_seen && scale_after_mask && !(m.scale > 0))
      return miss(why, "a non-positive scale after a -inf mask");
    if (!std::isfinite(m.scale)) return miss(why, "the scale is not finite");
    // dtypes: q, k, v share one floating dtype; the chain stays in it or in f32 for a half one.
    DType t = g_.values[m.q].meta.dtype;
    if (!is_floating(t) || g_.values[m.kt].meta.dtype != t || g_.values[m.v].meta.dtype != t)
      return miss(why, "q, k and v do not share one floating dtype");
    for (int v : chain) {
      DType c = g_.values[v].meta.dtype;
      if (c != t && !(c == DType::f32 && (t == DType::f16 || t == DType::bf16)))
        return miss(why, fmt::format("the scores change dtype to {}", c));
    }
    if (g_.values[after.back()].meta.dtype != t ||
        g_.values[g_.nodes[second].output()].meta.dtype != t)
      return miss(why, "the probabilities are not cast back to the inputs' dtype");
    if (m.mask >= 0) {
      DType md = g_.values[m.mask].meta.dtype;
      if (!additive && md != DType::bool_) return miss(why, "the where's condition is not bool");
      if (additive && !is_floating(md)) return miss(why, "the additive mask is not floating");
    }
    // Back to front -> forward order.
    m.steps.assign(back.rbegin(), back.rend());
    m.steps.push_back("softmax");
    if (after.size() > 1) m.steps.push_back("cast");
    m.steps.push_back("matmul");
    return m;
  }

 private:
  const Node* producer(int v) const {
    int p = g_.values[v].producer;
    return p >= 0 ? &g_.nodes[p] : nullptr;
  }

  // The one node reading `v`, or -1 (none, several, or a graph output).
  int sole_reader(int v) const {
    if (readers_[v] != 1) return -1;
    for (std::size_t i = 0; i < g_.nodes.size(); ++i)
      for (int in : g_.nodes[i].inputs)
        if (in == v) return static_cast<int>(i);
    return -1;
  }

  static bool scores_like(OpId op) {
    return op == OpId::matmul || op == OpId::mul || op == OpId::div || op == OpId::cast ||
           op == OpId::where;
  }

  // The value of a constant whose elements are all equal (through views, casts and transfers).
  std::optional<double> constant_scalar(int v) const {
    for (const Node* p = producer(v); p; p = producer(v)) {
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
  std::vector<int> readers_;
};

// Adds a node reading `inputs` to `list` (not yet to g.nodes), with its output values typed and
// sized; returns the index of its first output value.
int emit(Graph& g, std::vector<Node>& list, OpId op, std::vector<int> inputs, const OpAttrs& attrs,
         const Node& like) {
  std::vector<TensorMeta> metas;
  std::vector<SizeExprs> sizes;
  for (int v : inputs) {
    metas.push_back(g.values[v].meta);
    sizes.push_back(g.values[v].sizes);
  }
  std::vector<TensorMeta> outs = infer_meta(op, metas, attrs);
  std::vector<SizeExprs> out_sizes = infer_size_exprs(op, sizes, metas, attrs, outs);
  Node node;
  node.op = op;
  node.attrs = attrs;
  node.inputs = std::move(inputs);
  node.grad = like.grad;
  node.checkpoint = like.checkpoint;
  Device device = g.values[like.output()].device;
  StrideClass in_strides = g.values[node.inputs[0]].strides;
  for (std::size_t k = 0; k < outs.size(); ++k) {
    int v = g.add_value(outs[k], -1, static_cast<int>(k));
    g.values[v].sizes = out_sizes[k];
    g.values[v].device = device;
    g.values[v].strides = output_strides(op, attrs, in_strides);
    node.outputs.push_back(v);
  }
  list.push_back(std::move(node));
  return list.back().outputs[0];
}

}  // namespace

AttentionRewriteReport rewrite_attention(Graph& g) {
  AttentionRewriteReport report;
  std::vector<Match> matches;
  {
    Matcher matcher(g);
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
      if (g.nodes[i].op != OpId::softmax) continue;
      std::string why;
      if (auto m = matcher.match(static_cast<int>(i), why)) {
        matches.push_back(std::move(*m));
      } else if (!why.empty()) {
        report.near_misses.push_back({static_cast<int>(i), why});
        if (log_enabled(LogTopic::fusion))
          log_line(
              fmt::format("kiln: fusion: attention in '{}' not rewritten at softmax node {}: {}",
                          g.name, i, why));
      }
    }
  }
  if (matches.empty()) return report;
  std::vector<std::vector<Node>> before(g.nodes.size());
  std::vector<std::pair<int, int>> replaced;  // (old output, attention output)
  std::vector<std::string> patterns;
  for (const Match& m : matches) {
    const Node like = g.nodes[m.final_matmul];
    auto& list = before[m.final_matmul];
    // k: the value kᵀ transposes, or a transposing view of the right operand.
    int k = -1;
    if (int p = g.values[m.kt].producer;
        p >= 0 && g.nodes[p].op == OpId::permute && swaps_last_two(g.nodes[p].attrs.dims)) {
      k = g.nodes[p].inputs[0];
    } else {
      OpAttrs t;
      t.dims = last_two_swapped(g.values[m.kt].meta.shape.size());
      k = emit(g, list, OpId::permute, {m.kt}, t, like);
    }
    std::vector<int> inputs{m.q, k, m.v};
    if (m.mask >= 0)
      inputs.push_back(m.negate_mask ? emit(g, list, OpId::logical_not, {m.mask}, {}, like)
                                     : m.mask);
    OpAttrs attrs;
    attrs.scale = m.scale;
    int out = emit(g, list, OpId::attention, inputs, attrs, like);
    int old = like.output();
    const Value &a = g.values[out], &b = g.values[old];
    if (a.meta.shape != b.meta.shape || a.meta.dtype != b.meta.dtype) {
      list.clear();  // the op's batch broadcasting disagrees with the matmuls': leave it
      report.near_misses.push_back({m.softmax, "the fused op's output shape differs"});
      continue;
    }
    replaced.emplace_back(old, out);
    patterns.push_back(fmt::format("{}", fmt::join(m.steps, ".")));
  }
  std::vector<Node> nodes;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    for (auto& n : before[i]) nodes.push_back(std::move(n));
    nodes.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(nodes);
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (std::size_t k = 0; k < g.nodes[i].outputs.size(); ++k) {
      g.values[g.nodes[i].outputs[k]].producer = static_cast<int>(i);
      g.values[g.nodes[i].outputs[k]].output_index = static_cast<int>(k);
    }
  for (auto [old, out] : replaced) replace_uses(g, old, out);
  eliminate_dead_code(g);
  for (std::size_t r = 0; r < replaced.size(); ++r) {
    int node = g.values[replaced[r].second].producer;
    report.rewrites.push_back({patterns[r], node});
    if (log_enabled(LogTopic::fusion))
      log_line(fmt::format("kiln: fusion: attention in '{}' rewritten ({}) into node {}: {}",
                           g.name, patterns[r], node,
                           shape_str(g.values[replaced[r].second].meta.shape)));
  }
  return report;
}

}  // namespace kiln::graph
