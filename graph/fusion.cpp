// The fuser's partition (rules in fusion.h): greedy vertical merging along edges in graph order,
// then sibling merging; every refused merge leaves its reason on the edge.
#include "graph/fusion.h"

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
      : g_(g), limits_(limits), coverage_(coverage), readers_(g) {
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
    if (coverage_ && moves_by_index(node.op)) {
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
    if (auto why = lone_movement_reason(a, b)) return why;
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
      if (level_in(d, g_.values[v].sizes) == Level::none && !index_mapped(v, inside, d))
        return level_reason(v, d);
    }
    if (d.reduces)
      for (int n : members)
        if (!rows_reason_[n].empty() && !position_in_rows(n, d)) return rows_reason_[n];
    if (auto why = view_reason(members, inside, d)) return why;
    if (auto why = index_reason(members, inside, d)) return why;
    if (auto why = row_reason(members, inside, d)) return why;
    if (auto why = alignment_reason(members, inside, d)) return why;
    return bound_reason(members, inside);
  }

  // An op reading its element's row and column (tril) in a kernel with reductions: the element's
  // linear index is row * cols + col there when the reduced dims are the trailing ones, so it
  // renders over full values whose last two dims are the domain's (constant sizes).
  bool position_in_rows(int n, const Domain& d) const {
    if (!coverage_ || !coverage_->reads_position(g_, n) || d.sizes.size() < 2) return false;
    auto rank = static_cast<std::int64_t>(d.sizes.size());
    std::vector<std::int64_t> dims = d.dims;
    std::sort(dims.begin(), dims.end());
    for (std::size_t i = 0; i < dims.size(); ++i)
      if (dims[i] != rank - static_cast<std::int64_t>(dims.size() - i)) return false;
    const auto& out = g_.values[g_.nodes[n].output()].sizes;
    if (out.size() < 2 || level_in(d, out) != Level::full) return false;
    for (std::size_t k = 1; k <= 2; ++k)
      if (!out[out.size() - k].is_constant() ||
          !(out[out.size() - k] == d.sizes[d.sizes.size() - k]))
        return false;
    return true;
  }

  // A cat or pad that would compute nothing else (with only views of what it reads) stays a
  // movement kernel of its own: it copies its inputs where they lie, and a plan may have their
  // producers write into it (attention's placed gradients).
  std::optional<std::string> lone_movement_reason(int a, int b) const {
    int computing = 0, moving = -1;
    for (int n : nodes_of(a, b)) {
      if (op_class(g_.nodes[n].op) == OpClass::view) continue;
      ++computing;
      if (moves_by_index(g_.nodes[n].op)) moving = n;
    }
    if (computing != 1 || moving < 0) return std::nullopt;
    return fmt::format(
        "{} computes nothing else in the kernel: it copies its inputs where they lie, a kernel of "
        "its own",
        g_.nodes[moving].op);
  }

  static bool moves_by_index(OpId op) { return op == OpId::cat || op == OpId::pad; }

  // Whether value `v` is computed in registers by a kernel of `inside` (not a host-side view of
  // what it reads).
  bool computed_in(int v, const std::set<int>& inside) const {
    int p = g_.values[v].producer;
    if (p < 0 || !inside.count(p)) return false;
    return op_class(g_.nodes[p].op) != OpClass::view ||
           computed_in(g_.nodes[p].inputs.at(0), inside);
  }

  // A reshape of an expanded view (grouped-query heads repeated): a copy on the host, read by
  // index in a pointwise kernel instead.
  bool reshapes_expanded(const Node& node) const {
    if (node.op != OpId::reshape) return false;
    const Node* p = producer_of(g_, node.inputs.at(0));
    return p && p->op == OpId::expand && constant_sizes(g_.values[node.inputs[0]].sizes) &&
           constant_sizes(g_.values[node.output()].sizes);
  }

  // Whether the kernel made of `inside` moves data by index (an index-aware kernel).
  bool moves_data(const std::set<int>& inside) const {
    return std::any_of(inside.begin(), inside.end(), [&](int n) {
      const Node& node = g_.nodes[n];
      return moves_by_index(node.op) || reshapes_expanded(node) ||
             (op_class(node.op) == OpClass::view && computed_in(node.inputs.at(0), inside));
    });
  }

  static bool constant_sizes(const std::vector<SymExpr>& sizes) {
    return std::all_of(sizes.begin(), sizes.end(),
                       [](const SymExpr& s) { return s.is_constant(); });
  }

  // Rule 2 for index-aware pointwise kernels: a value that does not cover the domain is computed
  // where an index map (cat, pad, slice, permute, unit reshape) reads it, at the coordinates the
  // map gives, so each of its elements is computed once per map that reads it. Allowed where it
  // is read only inside the kernel, by such maps or by elementwise ops of its own sizes (never
  // broadcast: that would recompute it for every element).
  bool index_mapped(int v, const std::set<int>& inside, const Domain& d) const {
    if (!coverage_ || d.reduces || !constant_sizes(g_.values[v].sizes) || readers_.returned(v))
      return false;
    for (int r : readers_.nodes(v)) {
      if (!inside.count(r)) return false;
      const Node& node = g_.nodes[r];
      if (moves_by_index(node.op) || op_class(node.op) == OpClass::view) continue;
      if (fusion_class(g_, node) != OpClass::elementwise ||
          !same_sizes(g_.values[node.output()].sizes, g_.values[v].sizes))
        return false;
    }
    return true;
  }

  // An index-aware kernel bakes its sizes into its code and writes only values of the domain's
  // shape (every other value is computed at mapped coordinates, never in its own order).
  std::optional<std::string> index_reason(const std::vector<int>& members,
                                          const std::set<int>& inside, const Domain& d) const {
    if (!coverage_ || d.reduces || !moves_data(inside)) return std::nullopt;
    if (!constant_sizes(d.sizes))
      return fmt::format(
          "a kernel that moves data by index needs constant sizes, and its domain {} is symbolic",
          sizes_str(d.sizes));
    auto squeezed = [](const std::vector<SymExpr>& sizes) {
      std::size_t k = 0;
      while (k < sizes.size() && sizes[k].is_constant() && sizes[k].constant_value() == 1) ++k;
      return std::vector<SymExpr>(sizes.begin() + static_cast<std::ptrdiff_t>(k), sizes.end());
    };
    for (int n : members)
      for (int v : g_.nodes[n].outputs) {
        if (!computed_in(v, inside)) continue;
        const auto& sizes = g_.values[v].sizes;
        bool outside =
            readers_.returned(v) || std::any_of(readers_.nodes(v).begin(), readers_.nodes(v).end(),
                                                [&](int c) { return !inside.count(c); });
        if (!outside) continue;
        if (!constant_sizes(sizes) || !same_sizes(squeezed(sizes), squeezed(d.sizes)))
          return fmt::format(
              "%{} {} is read outside a kernel that moves data by index over {}: such a kernel "
              "writes only values of its domain's shape",
              v, sizes_str(sizes), sizes_str(d.sizes));
      }
    return std::nullopt;
  }

  // Rule 1: a view of a value the kernel computes, where the code generator cannot render it.
  std::optional<std::string> view_reason(const std::vector<int>& members,
                                         const std::set<int>& inside, const Domain& d) const {
    if (!coverage_) return std::nullopt;
    for (int n : members) {
      const Node& node = g_.nodes[n];
      if (op_class(node.op) != OpClass::view) continue;
      int p = g_.values[node.inputs.at(0)].producer;
      if (p < 0 || !inside.count(p)) continue;
      if (auto why = coverage_->unrendered_view(
              g_, n, d.reduces ? FusionKind::reduction : FusionKind::pointwise))
        return why;
    }
    return std::nullopt;
  }

  // A value of the rows' shape without keepdim, read by an op over the whole domain, is
  // broadcast right-aligned: it lines up with the rows only when the rows are the trailing
  // dims. Otherwise ([n, n] reduced over dim 1 gives [n], which broadcasts along dim 1) it is
  // not one value per row, and the kernel would read it as one.
  std::optional<std::string> alignment_reason(const std::vector<int>& members,
                                              const std::set<int>& inside, const Domain& d) const {
    if (!d.reduces) return std::nullopt;
    auto rank = static_cast<std::int64_t>(d.sizes.size());
    bool trailing_rows = true;
    for (std::size_t i = 0; i < d.dims.size(); ++i)
      trailing_rows = trailing_rows && d.dims[i] == static_cast<std::int64_t>(i);
    if (trailing_rows) return std::nullopt;
    for (int n : members) {
      const Node& node = g_.nodes[n];
      if (fusion_class(g_, node) != OpClass::elementwise ||
          level_in(d, g_.values[node.output()].sizes) != Level::full)
        continue;
      for (int v : node.inputs) {
        int p = g_.values[v].producer;
        const auto& sizes = g_.values[v].sizes;
        if (p >= 0 && inside.count(p) && static_cast<std::int64_t>(sizes.size()) < rank &&
            level_in(d, sizes) == Level::reduced)
          return fmt::format(
              "%{} {} has the rows' shape without keepdim, but broadcast against {} it lines "
              "up with dims [{}..{}], not the rows",
              v, sizes_str(sizes), sizes_str(d.sizes),
              rank - static_cast<std::int64_t>(sizes.size()), rank - 1);
      }
    }
    return std::nullopt;
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

  std::string level_reason(int v, const Domain& d) const {
    const Value& val = g_.values[v];
    auto have = numel(val.meta.shape);
    std::int64_t want = 1;
    for (const auto& s : d.sizes) want *= s.is_constant() ? s.constant_value() : 1;
    bool symbolic = std::any_of(d.sizes.begin(), d.sizes.end(),
                                [](const SymExpr& s) { return !s.is_constant(); });
    std::string what = fmt::format("%{} {}", v, sizes_str(val.sizes));
    if (!symbolic && have < want)
      return fmt::format(
          "{} is broadcast over {}: fusing would recompute its producers for "
          "every element",
          what, sizes_str(d.sizes));
    if (!symbolic && have > want)
      return fmt::format(
          "{} is larger than the domain {} it would join: its producers would "
          "compute elements nobody reads",
          what, sizes_str(d.sizes));
    if (d.reduces)
      return fmt::format("{} is neither the rows {} dims [{}] nor their reduced shape", what,
                         sizes_str(d.sizes), fmt::join(d.dims, ", "));
    return fmt::format("{} does not cover the same elements as the domain {}", what,
                       sizes_str(d.sizes));
  }

  // A value reduced inside the kernel and read again over its rows needs each row on one block:
  // impossible when the reduction folds every dim (that would take a grid-wide barrier).
  std::optional<std::string> row_reason(const std::vector<int>& members,
                                        const std::set<int>& inside, const Domain& d) const {
    if (!d.reduces || !reduce_dims(d.sizes, d.dims, false, SymExpr::constant(1)).empty())
      return std::nullopt;
    for (int n : members) {
      const Node& node = g_.nodes[n];
      bool reads_full = fusion_class(g_, node) == OpClass::reduction ||
                        op_class(node.op) == OpClass::normalization ||
                        level_in(d, g_.values[node.output()].sizes) == Level::full;
      if (!reads_full) continue;
      for (int v : node.inputs) {
        int p = g_.values[v].producer;
        if (p >= 0 && inside.count(p) && level_in(d, g_.values[v].sizes) == Level::reduced)
          return fmt::format(
              "%{} reduces every dim of {} and is read back over every element: "
              "that needs a grid-wide barrier",
              v, sizes_str(d.sizes));
      }
    }
    return std::nullopt;
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
      if (!moves_by_index(node.op) && op_class(node.op) != OpClass::view) continue;
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
                return !rows_reason_[n].empty() && !position_in_rows(n, da);
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
    bool fused_move = wg.nodes.size() > 1 && moves_by_index(first);
    switch (fused_select ? OpClass::reduction
            : fused_move ? OpClass::elementwise
                         : op_class(first)) {
      case OpClass::matmul:
        return FusionKind::matmul;
      case OpClass::index:
        return FusionKind::index;
      case OpClass::scan:
        return FusionKind::scan;
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
