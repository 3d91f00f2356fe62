// The fuser's partition (rules in fusion.h): greedy vertical merging along edges in graph order,
// then sibling merging; every refused merge leaves its reason on the edge.
#include "graph/fusion.h"

#include "graph/fusion_checks.h"
#include "graph/fusion_domain.h"
#include "graph/rewrite.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <queue>
#include <set>

namespace kiln::graph {
namespace {

using namespace detail;

struct WorkGroup {
  std::vector<int> nodes;
  Domain domain;
  bool fusible = true;
  bool alive = true;
  std::string unrendered;  // rule 1: why the code generator cannot render its one node
};

class Partitioner {
 public:
  Partitioner(const Graph& g, const FusionLimits& limits, const KernelCoverage* coverage)
      : g_(g), limits_(limits), coverage_(coverage), readers_(g), checks_(g, coverage, readers_) {
    rows_reason_.resize(g.nodes.size());
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
      group_of_.push_back(static_cast<int>(i));
      groups_.push_back(initial_group(static_cast<int>(i)));
    }
  }

  Partition run() {
    for (std::size_t n = 0; n < g_.nodes.size(); ++n)
      for (int v : g_.nodes[n].inputs) try_edge(v, static_cast<int>(n));
    merge_siblings();
    pull_views();
    retry_index_maps();
    return finish();
  }

 private:
  WorkGroup initial_group(int n) {
    const Node& node = g_.nodes[n];
    WorkGroup w;
    w.nodes = {n};
    OpClass c = fusion_class(g_, node);
    w.fusible = is_fusible(c);
    // cat and pad join pointwise kernels as index arithmetic where the code generator says so.
    if (coverage_ && KernelChecks::moves_by_index(node.op)) {
      w.fusible = !coverage_->unrendered_reason(g_, n, FusionKind::pointwise);
      if (auto in_rows = coverage_->unrendered_reason(g_, n, FusionKind::reduction))
        rows_reason_[n] = std::move(*in_rows);
    }
    // Rule 1: what the code generator cannot render runs alone (views: when they join, below).
    if (w.fusible && coverage_ && c != OpClass::view) {
      bool rows = c == OpClass::reduction || c == OpClass::normalization;
      auto why =
          coverage_->unrendered_reason(g_, n, rows ? FusionKind::reduction : FusionKind::pointwise);
      if (why) {
        w.fusible = false;
        w.unrendered = std::move(*why);
      } else if (!rows) {
        auto in_rows = coverage_->unrendered_reason(g_, n, FusionKind::reduction);
        if (in_rows) rows_reason_[n] = std::move(*in_rows);
      }
    }
    if (c == OpClass::reduction || c == OpClass::normalization) {
      const Value& x = g_.values[node.inputs.at(0)];
      auto rank = static_cast<std::int64_t>(x.sizes.size());
      bool one_dim = c == OpClass::normalization || node.op == OpId::max_dim ||
                     node.op == OpId::min_dim || node.op == OpId::gather;
      w.domain = {
          x.sizes,
          normalize_dims(one_dim ? std::vector<std::int64_t>{node.attrs.dim} : node.attrs.dims,
                         rank, op_name(node.op)),
          true};
    } else {
      w.domain.sizes = g_.values[node.output()].sizes;
    }
    return w;
  }

  std::vector<int> nodes_of(int a, int b) const {
    std::vector<int> all = groups_[a].nodes;
    all.insert(all.end(), groups_[b].nodes.begin(), groups_[b].nodes.end());
    return all;
  }

  // Tries to fuse the group making `v` with the group of its consumer `n`. Views join the
  // kernel of their consumers (never the other way round, which would materialize them); once
  // one has joined, the edges into it are tried again.
  void try_edge(int v, int n) {
    int p = g_.values[v].producer;
    if (p < 0) return;
    int a = group_of_[p], b = group_of_[n];
    if (a == b) return;
    if (groups_[b].fusible && !computes(b)) {
      reasons_[{v, n}] = fmt::format(
          "%{} feeds a view, which stays on the host unless one kernel "
          "reads it",
          v);
      return;
    }
    if (auto why = why_not(a, b, v)) {
      reasons_[{v, n}] = *why;
      return;
    }
    bool pulled_view = !computes(a);
    std::vector<int> pulled = groups_[a].nodes;
    merge(a, b, groups_[a].domain.reduces ? groups_[a].domain : groups_[b].domain);
    if (pulled_view)
      for (int m : pulled)
        for (int u : g_.nodes[m].inputs) try_edge(u, m);
  }

  std::optional<std::string> why_not(int a, int b, int edge_value) const {
    for (int w : {a, b})
      if (!groups_[w].fusible)
        return groups_[w].unrendered.empty() ? boundary_reason(g_.nodes[groups_[w].nodes[0]].op)
                                             : groups_[w].unrendered;
    if (auto why = checks_.lone_movement_reason(nodes_of(a, b))) return why;
    if (!computes(a))
      for (int n : groups_[a].nodes)
        for (int v : g_.nodes[n].outputs) {
          bool returned = readers_.returned(v);
          bool shared = std::any_of(readers_.nodes(v).begin(), readers_.nodes(v).end(),
                                    [&](int c) { return group_of_[c] != a && group_of_[c] != b; });
          if (returned || shared)
            return fmt::format(
                "%{} is a view read by several kernels or returned: it stays a "
                "host-side view",
                v);
        }
    const Domain& da = groups_[a].domain;
    const Domain& db = groups_[b].domain;
    if (da.reduces && db.reduces && (!same_sizes(da.sizes, db.sizes) || da.dims != db.dims))
      return fmt::format("reductions over different rows: {} dims [{}] and {} dims [{}]",
                         sizes_str(da.sizes), fmt::join(da.dims, ", "), sizes_str(db.sizes),
                         fmt::join(db.dims, ", "));
    if (int via = indirect_path(a, b); via >= 0)
      return fmt::format(
          "fusing would make a cycle: the consumer also depends on the producer "
          "through {}",
          op_name(g_.nodes[groups_[via].nodes[0]].op));
    Domain d = da.reduces ? da : db;
    auto members = nodes_of(a, b);
    std::set<int> inside(members.begin(), members.end());
    // Every value the merged kernel computes must be full or reduced in its domain; the edge's
    // own value is checked first so that the reason names it.
    std::vector<int> values = {edge_value};
    for (int n : members)
      for (int v : g_.nodes[n].outputs) values.push_back(v);
    if (auto why = library_bias_reason(a, b)) return why;
    bool recompute_a = recomputable(a, b);
    for (int v : values) {
      int p = g_.values[v].producer;
      if (recompute_a && p >= 0 && group_of_[p] == a) continue;
      // A cast of inputs that an earlier merge accepted for recomputation.
      if (p >= 0 && is_input_cast(p) && groups_[group_of_[p]].nodes.size() > 1) continue;
      if (level_in(d, g_.values[v].sizes) == Level::none && !checks_.index_mapped(v, inside, d))
        return checks_.level_reason(v, d);
    }
    if (d.reduces)
      for (int n : members)
        if (!rows_reason_[n].empty() && !checks_.position_in_rows(n, d)) return rows_reason_[n];
    if (auto why = checks_.view_reason(members, inside, d)) return why;
    if (auto why = checks_.index_reason(members, inside, d)) return why;
    if (auto why = checks_.row_reason(members, inside, d)) return why;
    if (auto why = checks_.alignment_reason(members, inside, d)) return why;
    return bound_reason(members, inside);
  }

  bool is_input_cast(int n) const {
    const Node& node = g_.nodes[n];
    if (node.op != OpId::cast && node.op != OpId::copy) return false;
    return std::all_of(node.inputs.begin(), node.inputs.end(),
                       [&](int v) { return g_.values[v].producer < 0; });
  }

  // A cast of a graph input that `b` adds to a matmul's product as its bias (one value per
  // output feature; autocast's bias) is left a kernel of its own, a combo member: recomputed
  // in `b`, it would keep `b` from being the product's cuBLASLt epilogue (the BIAS epilogue
  // reads the bias from memory), which saves writing the product and reading it back.
  std::optional<std::string> library_bias_reason(int a, int b) const {
    const WorkGroup& w = groups_[a];
    if (w.nodes.size() != 1 || !is_input_cast(w.nodes[0])) return std::nullopt;
    const int bias = g_.nodes[w.nodes[0]].output();
    const auto& bias_shape = g_.values[bias].meta.shape;
    if (bias_shape.size() != 1) return std::nullopt;
    auto of_bias = [&](int v) {
      if (v == bias) return true;
      int p = g_.values[v].producer;
      return p >= 0 && g_.nodes[p].op == OpId::expand && g_.nodes[p].inputs[0] == bias;
    };
    auto product = [&](int v) {
      int p = g_.values[v].producer;
      const auto& shape = g_.values[v].meta.shape;
      return p >= 0 && g_.nodes[p].op == OpId::matmul && !shape.empty() &&
             shape.back() == bias_shape[0];
    };
    for (int n : groups_[b].nodes) {
      const Node& node = g_.nodes[n];
      if (node.op != OpId::add || node.inputs.size() != 2) continue;
      const int x = node.inputs[0], y = node.inputs[1];
      if ((product(x) && of_bias(y)) || (product(y) && of_bias(x)))
        return fmt::format(
            "%{} is the bias of matmul product %{}: a kernel of its own, so that the product's "
            "epilogue can be a cuBLASLt call",
            bias, product(x) ? x : y);
    }
    return std::nullopt;
  }

  // Rule 5's exception: `a` only casts graph inputs, and only `b` reads what it makes.
  bool recomputable(int a, int b) const {
    const WorkGroup& w = groups_[a];
    if (w.domain.reduces || w.nodes.size() != 1) return false;
    for (int n : w.nodes) {
      const Node& node = g_.nodes[n];
      if (!is_input_cast(n)) return false;
      for (int v : node.outputs) {
        if (readers_.returned(v)) return false;
        for (int c : readers_.nodes(v))
          if (group_of_[c] != a && group_of_[c] != b) return false;
      }
    }
    return true;
  }

  std::optional<std::string> bound_reason(const std::vector<int>& members,
                                          const std::set<int>& inside) const {
    if (static_cast<int>(members.size()) > limits_.max_nodes)
      return fmt::format("the kernel would compute {} nodes (limit {})", members.size(),
                         limits_.max_nodes);
    auto reads = external_inputs(members, inside).size();
    if (static_cast<int>(reads) > limits_.max_inputs)
      return fmt::format("the kernel would read {} tensors (limit {})", reads, limits_.max_inputs);
    return std::nullopt;
  }

  // Tensors the nodes read from outside; 0-dim constants become kernel constants, not reads.
  std::vector<int> external_inputs(const std::vector<int>& members,
                                   const std::set<int>& inside) const {
    std::vector<int> out;
    for (int n : members)
      for (int v : g_.nodes[n].inputs) {
        int p = g_.values[v].producer;
        if (p >= 0 && inside.count(p)) continue;
        if (p < 0 && g_.is_constant(v) && g_.values[v].meta.shape.empty()) continue;
        if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
      }
    return out;
  }

  std::set<int> successors(int w) const {
    std::set<int> out;
    for (int n : groups_[w].nodes)
      for (int v : g_.nodes[n].outputs)
        for (int c : readers_.nodes(v))
          if (group_of_[c] != w) out.insert(group_of_[c]);
    return out;
  }

  // A group other than the two through which `to` is reachable from `from`, or -1.
  int indirect_path(int from, int to) const {
    std::queue<std::pair<int, int>> todo;  // (group, the first group on its path)
    std::set<int> seen;
    for (int s : successors(from))
      if (s != to) todo.push({s, s}), seen.insert(s);
    while (!todo.empty()) {
      auto [w, via] = todo.front();
      todo.pop();
      for (int s : successors(w)) {
        if (s == to) return via;
        if (seen.insert(s).second) todo.push({s, via});
      }
    }
    return -1;
  }

  void merge(int a, int b, Domain d) {
    for (int n : groups_[b].nodes) group_of_[n] = a;
    groups_[a].nodes.insert(groups_[a].nodes.end(), groups_[b].nodes.begin(),
                            groups_[b].nodes.end());
    groups_[a].domain = std::move(d);
    groups_[b].alive = false;
    groups_[b].nodes.clear();
  }

  // Every value group `w` computes covers domain `d` (so w's nodes can join a kernel over d).
  bool full_over(int w, const Domain& d) const {
    return std::all_of(groups_[w].nodes.begin(), groups_[w].nodes.end(), [&](int n) {
      const Node& node = g_.nodes[n];
      return op_class(node.op) == OpClass::view ||
             std::all_of(node.outputs.begin(), node.outputs.end(),
                         [&](int v) { return level_in(d, g_.values[v].sizes) == Level::full; });
    });
  }

  bool computes(int w) const {
    return std::any_of(groups_[w].nodes.begin(), groups_[w].nodes.end(),
                       [&](int n) { return op_class(g_.nodes[n].op) != OpClass::view; });
  }

  // Views left on the host because their readers were in several groups when tried: once the
  // readers share one kernel, that kernel takes the view.
  void pull_views() {
    for (std::size_t w = 0; w < groups_.size(); ++w) {
      if (!groups_[w].alive || !groups_[w].fusible || computes(static_cast<int>(w))) continue;
      auto next = successors(static_cast<int>(w));
      if (next.size() != 1) continue;
      int b = *next.begin();
      int n = groups_[b].nodes.front();
      for (int m : groups_[b].nodes)
        for (int v : g_.nodes[m].inputs)
          if (g_.values[v].producer >= 0 && group_of_[g_.values[v].producer] == static_cast<int>(w))
            n = m;
      try_edge(g_.nodes[groups_[w].nodes.back()].output(), n);
    }
  }

  // An index map of a computed value tried while other maps of it were still on the host (so
  // it looked read elsewhere) is tried again once they share one kernel.
  void retry_index_maps() {
    if (!coverage_) return;
    for (std::size_t n = 0; n < g_.nodes.size(); ++n) {
      const Node& node = g_.nodes[n];
      if (!KernelChecks::moves_by_index(node.op) && op_class(node.op) != OpClass::view) continue;
      for (int v : node.inputs) try_edge(v, static_cast<int>(n));
    }
  }

  // Rule 7: groups over the same domain and rows that are independent and read a common tensor,
  // or tensors one group writes (a norm backward's weight and input-gradient column sums).
  void merge_siblings() {
    std::map<int, std::vector<int>> sources;  // producing group, or -1 - value for an input
    for (std::size_t v = 0; v < g_.values.size(); ++v) {
      int p = g_.values[v].producer;
      sources[p >= 0 ? group_of_[p] : -1 - static_cast<int>(v)].push_back(static_cast<int>(v));
    }
    for (const auto& [source, values] : sources) {
      std::vector<int> readers;
      for (int v : values)
        for (int c : readers_.nodes(v)) {
          int w = group_of_[c];
          if (w != source && groups_[w].fusible && computes(w) &&
              std::find(readers.begin(), readers.end(), w) == readers.end())
            readers.push_back(w);
        }
      for (std::size_t i = 0; i < readers.size(); ++i)
        for (std::size_t j = i + 1; j < readers.size(); ++j) {
          int a = readers[i], b = readers[j];
          if (!groups_[a].alive || !groups_[b].alive) continue;
          // A pointwise sibling over a reduction's whole domain joins it as an elementwise
          // output (GELU's value and its derivative's column sum, both from the saved input).
          if (!groups_[a].domain.reduces && groups_[b].domain.reduces) std::swap(a, b);
          const Domain& da = groups_[a].domain;
          const Domain& db = groups_[b].domain;
          if (!same_sizes(da.sizes, db.sizes)) continue;
          if (da.reduces == db.reduces ? da.dims != db.dims : !full_over(b, da)) continue;
          if (indirect_path(a, b) >= 0 || indirect_path(b, a) >= 0 || successors(a).count(b) ||
              successors(b).count(a))
            continue;
          auto members = nodes_of(a, b);
          std::set<int> inside(members.begin(), members.end());
          if (bound_reason(members, inside)) continue;
          if (da.reduces && std::any_of(members.begin(), members.end(), [&](int n) {
                return !rows_reason_[n].empty() && !checks_.position_in_rows(n, da);
              }))
            continue;
          merge(a, b, da);
        }
    }
  }

  Partition finish() {
    // Groups in dependency order (Kahn), ties broken by their first node.
    std::vector<int> alive;
    for (std::size_t w = 0; w < groups_.size(); ++w)
      if (groups_[w].alive) {
        std::sort(groups_[w].nodes.begin(), groups_[w].nodes.end());
        alive.push_back(static_cast<int>(w));
      }
    std::map<int, int> indegree;
    for (int w : alive) indegree[w] += 0;
    for (int w : alive)
      for (int s : successors(w)) ++indegree[s];
    auto first = [&](int w) { return groups_[w].nodes.front(); };
    auto later = [&](int x, int y) { return first(x) > first(y); };
    std::priority_queue<int, std::vector<int>, decltype(later)> ready(later);
    for (int w : alive)
      if (indegree[w] == 0) ready.push(w);
    std::vector<int> order;
    while (!ready.empty()) {
      int w = ready.top();
      ready.pop();
      order.push_back(w);
      for (int s : successors(w))
        if (--indegree[s] == 0) ready.push(s);
    }
    KILN_CHECK(order.size() == alive.size(), "fusion: the partition of graph '{}' has a cycle",
               g_.name);

    Partition out;
    std::map<int, int> index;
    for (int w : order) index[w] = static_cast<int>(index.size());
    out.group_of.resize(g_.nodes.size());
    for (std::size_t n = 0; n < g_.nodes.size(); ++n) out.group_of[n] = index[group_of_[n]];
    for (int w : order) out.groups.push_back(describe(w));
    for (std::size_t n = 0; n < g_.nodes.size(); ++n)
      for (int v : g_.nodes[n].inputs) {
        int p = g_.values[v].producer;
        if (p < 0 || out.group_of[p] == out.group_of[n]) continue;
        auto it = reasons_.find({v, static_cast<int>(n)});
        std::string why =
            it != reasons_.end() ? it->second : "merged groups changed after this edge was tried";
        out.unfused.push_back(
            {v, out.group_of[p], out.group_of[n], static_cast<int>(n), std::move(why)});
      }
    return out;
  }

  FusionGroup describe(int w) const {
    const WorkGroup& wg = groups_[w];
    FusionGroup fg;
    fg.nodes = wg.nodes;
    std::set<int> inside(wg.nodes.begin(), wg.nodes.end());
    fg.domain = wg.domain.sizes;
    if (wg.domain.reduces) fg.reduce_dims = wg.domain.dims;
    for (int n : wg.nodes)
      for (int v : g_.nodes[n].inputs) {
        int p = g_.values[v].producer;
        if ((p < 0 || !inside.count(p)) &&
            std::find(fg.inputs.begin(), fg.inputs.end(), v) == fg.inputs.end())
          fg.inputs.push_back(v);
      }
    for (int n : wg.nodes)
      for (int v : g_.nodes[n].outputs) {
        bool read_outside = std::any_of(readers_.nodes(v).begin(), readers_.nodes(v).end(),
                                        [&](int c) { return !inside.count(c); });
        bool returned = readers_.returned(v);
        if (read_outside || returned) fg.outputs.push_back(v);
      }
    fg.kind = wg.unrendered.empty() ? kind_of(wg, inside) : FusionKind::unrendered;
    fg.unrendered = wg.unrendered;
    std::vector<std::string> names;
    for (int n : wg.nodes) {
      std::string name(op_name(g_.nodes[n].op));
      bool view = op_class(g_.nodes[n].op) == OpClass::view;
      if ((!view || fg.kind == FusionKind::view) &&
          std::find(names.begin(), names.end(), name) == names.end())
        names.push_back(std::move(name));
    }
    fg.name = fmt::format("{}", fmt::join(names, "_"));
    return fg;
  }

  FusionKind kind_of(const WorkGroup& wg, const std::set<int>& inside) const {
    OpId first = g_.nodes[wg.nodes[0]].op;
    // A row select alone runs as the gather kernel; fused, it is one of the group's reductions.
    bool fused_select = wg.nodes.size() > 1 && is_row_select(g_, g_.nodes[wg.nodes[0]]);
    // A cat or pad with other nodes is index arithmetic in a pointwise kernel.
    bool fused_move = wg.nodes.size() > 1 && KernelChecks::moves_by_index(first);
    switch (fused_select ? OpClass::reduction
            : fused_move ? OpClass::elementwise
                         : op_class(first)) {
      case OpClass::matmul:
        return FusionKind::matmul;
      case OpClass::index:
        return FusionKind::index;
      case OpClass::scan:
        return FusionKind::scan;
      case OpClass::sort:
        return FusionKind::sort;
      case OpClass::cached_attention:
        return FusionKind::cached_attention;
      case OpClass::movement:
        return FusionKind::movement;
      case OpClass::transfer:
        return FusionKind::transfer;
      case OpClass::attention:
        return FusionKind::attention;
      default:
        break;
    }
    bool any_compute = false, normalizes = false;
    for (int n : wg.nodes) {
      const Node& node = g_.nodes[n];
      OpClass c = fusion_class(g_, node);
      any_compute = any_compute || c != OpClass::view;
      normalizes = normalizes || c == OpClass::normalization;
      // A full value computed from a reduced one of this kernel: the row is read back.
      if (wg.domain.reduces && c != OpClass::reduction &&
          level_in(wg.domain, g_.values[node.output()].sizes) == Level::full)
        for (int v : node.inputs) {
          int p = g_.values[v].producer;
          normalizes = normalizes || (p >= 0 && inside.count(p) &&
                                      level_in(wg.domain, g_.values[v].sizes) == Level::reduced);
        }
      // A reduction over values that depend on an earlier reduction (two-pass variance).
      if (c == OpClass::reduction) {
        int p = g_.values[node.inputs[0]].producer;
        normalizes = normalizes || (p >= 0 && inside.count(p) && depends_on_reduction(p, inside));
      }
    }
    if (!any_compute) return FusionKind::view;
    if (normalizes) return FusionKind::normalization;
    return wg.domain.reduces ? FusionKind::reduction : FusionKind::pointwise;
  }

  bool depends_on_reduction(int n, const std::set<int>& inside) const {
    std::vector<int> todo = {n};
    std::set<int> seen;
    while (!todo.empty()) {
      int m = todo.back();
      todo.pop_back();
      if (!seen.insert(m).second) continue;
      if (fusion_class(g_, g_.nodes[m]) == OpClass::reduction) return true;
      for (int v : g_.nodes[m].inputs) {
        int p = g_.values[v].producer;
        if (p >= 0 && inside.count(p)) todo.push_back(p);
      }
    }
    return false;
  }

  const Graph& g_;
  FusionLimits limits_;
  const KernelCoverage* coverage_;
  std::vector<std::string> rows_reason_;  // node -> why no kernel with reductions renders it
  Readers readers_;                       // value -> the nodes reading it; whether it is returned
  KernelChecks checks_;                   // the rules on one candidate kernel
  std::vector<int> group_of_;             // node -> work group
  std::vector<WorkGroup> groups_;
  std::map<std::pair<int, int>, std::string> reasons_;  // (value, consumer node) -> why not
};

}  // namespace

Partition partition(const Graph& graph, const FusionLimits& limits,
                    const KernelCoverage* coverage) {
  return Partitioner(graph, limits, coverage).run();
}

}  // namespace kiln::graph
