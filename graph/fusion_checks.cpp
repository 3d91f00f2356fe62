// The checks of one candidate kernel (fusion_checks.h): index maps, views, rows, alignment.
#include "graph/fusion_checks.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "graph/fusion.h"

namespace kiln::graph::detail {

// An op reading its element's row and column (tril) or linear index (a random op) in a kernel
// with reductions: the element's linear index is row * cols + col there when the reduced dims
// are the trailing ones, so it renders over full values (the domain's sizes; not a reduced or
// broadcast one, whose index is another), for tril whose last two dims are constant.
bool KernelChecks::position_in_rows(int n, const Domain& d) const {
  if (!coverage_) return false;
  bool index = coverage_->reads_index(g_, n);
  if (!index && (!coverage_->reads_position(g_, n) || d.sizes.size() < 2)) return false;
  auto rank = static_cast<std::int64_t>(d.sizes.size());
  std::vector<std::int64_t> dims = d.dims;
  std::sort(dims.begin(), dims.end());
  for (std::size_t i = 0; i < dims.size(); ++i)
    if (dims[i] != rank - static_cast<std::int64_t>(dims.size() - i)) return false;
  const auto& out = g_.values[g_.nodes[n].output()].sizes;
  if (index) return level_in(d, out) == Level::full;
  if (out.size() < 2 || level_in(d, out) != Level::full) return false;
  for (std::size_t k = 1; k <= 2; ++k)
    if (!out[out.size() - k].is_constant() || !(out[out.size() - k] == d.sizes[d.sizes.size() - k]))
      return false;
  return true;
}

// A cat or pad that would compute nothing else (with only views of what it reads) stays a
// movement kernel of its own: it copies its inputs where they lie, and a plan may have their
// producers write into it (attention's placed gradients).
std::optional<std::string> KernelChecks::lone_movement_reason(
    const std::vector<int>& members) const {
  int computing = 0, moving = -1;
  for (int n : members) {
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

bool KernelChecks::moves_by_index(OpId op) {
  return op == OpId::cat || op == OpId::pad;
}

// Whether value `v` is computed in registers by a kernel of `inside` (not a host-side view of
// what it reads).
bool KernelChecks::computed_in(int v, const std::set<int>& inside) const {
  int p = g_.values[v].producer;
  if (p < 0 || !inside.count(p)) return false;
  return op_class(g_.nodes[p].op) != OpClass::view || computed_in(g_.nodes[p].inputs.at(0), inside);
}

// A reshape of an expanded view (grouped-query heads repeated): a copy on the host, read by
// index in a pointwise kernel instead.
bool KernelChecks::reshapes_expanded(const Node& node) const {
  if (node.op != OpId::reshape) return false;
  const Node* p = producer_of(g_, node.inputs.at(0));
  return p && p->op == OpId::expand && tracked_sizes(g_.values[node.inputs[0]].sizes) &&
         tracked_sizes(g_.values[node.output()].sizes);
}

// Whether the kernel made of `inside` moves data by index (an index-aware kernel).
bool KernelChecks::moves_data(const std::set<int>& inside) const {
  return std::any_of(inside.begin(), inside.end(), [&](int n) {
    const Node& node = g_.nodes[n];
    return moves_by_index(node.op) || reshapes_expanded(node) ||
           (op_class(node.op) == OpClass::view && computed_in(node.inputs.at(0), inside));
  });
}

bool KernelChecks::tracked_sizes(const std::vector<SymExpr>& sizes) {
  return std::none_of(sizes.begin(), sizes.end(), [](const SymExpr& s) { return s.is_opaque(); });
}

// Rule 2 for index-aware pointwise kernels: a value that does not cover the domain is computed
// where an index map (cat, pad, slice, permute, unit reshape) reads it, at the coordinates the
// map gives, so each of its elements is computed once per map that reads it. Allowed where it
// is read only inside the kernel, by such maps or by elementwise ops of its own sizes (never
// broadcast: that would recompute it for every element).
bool KernelChecks::index_mapped(int v, const std::set<int>& inside, const Domain& d) const {
  if (!coverage_ || d.reduces || !tracked_sizes(g_.values[v].sizes) || readers_.returned(v))
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

// An index-aware kernel takes its sizes as constants or as arguments it is given (never one no
// expression tracks) and writes only values of the domain's shape (every other value is
// computed at mapped coordinates, never in its own order).
std::optional<std::string> KernelChecks::index_reason(const std::vector<int>& members,
                                                      const std::set<int>& inside,
                                                      const Domain& d) const {
  if (!coverage_ || d.reduces || !moves_data(inside)) return std::nullopt;
  if (!tracked_sizes(d.sizes))
    return fmt::format(
        "a kernel that moves data by index needs sizes it can be given, and its domain {} has "
        "one no expression tracks",
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
      if (!tracked_sizes(sizes) || !same_sizes(squeezed(sizes), squeezed(d.sizes)))
        return fmt::format(
            "%{} {} is read outside a kernel that moves data by index over {}: such a kernel "
            "writes only values of its domain's shape",
            v, sizes_str(sizes), sizes_str(d.sizes));
    }
  return std::nullopt;
}

// Rule 1: a view of a value the kernel computes, where the code generator cannot render it.
std::optional<std::string> KernelChecks::view_reason(const std::vector<int>& members,
                                                     const std::set<int>& inside,
                                                     const Domain& d) const {
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
std::optional<std::string> KernelChecks::alignment_reason(const std::vector<int>& members,
                                                          const std::set<int>& inside,
                                                          const Domain& d) const {
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
            v, sizes_str(sizes), sizes_str(d.sizes), rank - static_cast<std::int64_t>(sizes.size()),
            rank - 1);
    }
  }
  return std::nullopt;
}

std::string KernelChecks::level_reason(int v, const Domain& d) const {
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
std::optional<std::string> KernelChecks::row_reason(const std::vector<int>& members,
                                                    const std::set<int>& inside,
                                                    const Domain& d) const {
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

}  // namespace kiln::graph::detail
