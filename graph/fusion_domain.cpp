// Domains, value levels and boundary reasons (see fusion_domain.h), and the fusion.h queries
// built on them.
#include "graph/fusion_domain.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "graph/fusion.h"

namespace kiln::graph {
namespace detail {

std::optional<SymExpr> numel_of(const std::vector<SymExpr>& sizes) {
  SymExpr n = SymExpr::constant(1);
  for (const auto& s : sizes) {
    if (s.is_opaque()) return std::nullopt;
    n = n * s;
  }
  return n;
}

bool same_sizes(const std::vector<SymExpr>& a, const std::vector<SymExpr>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].is_opaque() || !(a[i] == b[i])) return false;
  return true;
}

Level level_in(const Domain& d, const std::vector<SymExpr>& sizes) {
  if (d.reduces) {
    if (same_sizes(sizes, d.sizes)) return Level::full;
    auto one = SymExpr::constant(1);
    if (same_sizes(sizes, reduce_dims(d.sizes, d.dims, true, one)) ||
        same_sizes(sizes, reduce_dims(d.sizes, d.dims, false, one)))
      return Level::reduced;
    return Level::none;
  }
  auto a = numel_of(sizes), b = numel_of(d.sizes);
  return a && b && *a == *b ? Level::full : Level::none;
}

bool is_fusible(OpClass c) {
  return c == OpClass::elementwise || c == OpClass::reduction || c == OpClass::normalization ||
         c == OpClass::view;
}

std::string sizes_str(const std::vector<SymExpr>& sizes) {
  std::vector<std::string> parts;
  for (const auto& s : sizes) parts.push_back(s.str());
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

std::string boundary_reason(OpId op) {
  switch (op_class(op)) {
    case OpClass::matmul:
      return fmt::format("{} is a library call (its epilogue is left to the cuBLASLt lowering)",
                         op);
    case OpClass::index:
      return fmt::format("{} is an indexing op: a kernel of its own", op);
    case OpClass::scan:
      return fmt::format("{} is a scan: a kernel of its own", op);
    case OpClass::sort:
      return fmt::format("{} sorts whole rows: kernels of its own", op);
    case OpClass::cached_attention:
      return fmt::format("{} reads a KV cache's live rows: kernels of its own", op);
    case OpClass::movement:
      return fmt::format("{} copies with index arithmetic: a kernel of its own", op);
    case OpClass::transfer:
      return fmt::format("{} is a device transfer", op);
    case OpClass::attention:
      return fmt::format("{} is a kernel of its own (its scores never leave the chip)", op);
    default:
      return fmt::format("{} does not fuse", op);
  }
}

}  // namespace detail

using namespace detail;

bool is_row_select(const Graph& graph, const Node& node) {
  if (node.op != OpId::gather) return false;
  const auto& x = graph.values[node.inputs[0]].sizes;
  const auto& index = graph.values[node.inputs[1]].sizes;
  if (x.size() != index.size() || x.empty()) return false;
  auto dim = normalize_dims({node.attrs.dim}, static_cast<std::int64_t>(x.size()), "gather")[0];
  // Over a dim of size 1 the index has the shape of the rows it selects from: a reduction kernel
  // could not tell its per-row values from per-element ones. The gather kernel takes it.
  if (x[dim] == SymExpr::constant(1)) return false;
  for (std::size_t d = 0; d < x.size(); ++d) {
    const SymExpr& want = static_cast<std::int64_t>(d) == dim ? SymExpr::constant(1) : x[d];
    if (index[d].is_opaque() || !(index[d] == want)) return false;
  }
  return true;
}

OpClass fusion_class(const Graph& graph, const Node& node) {
  return is_row_select(graph, node) ? OpClass::reduction : op_class(node.op);
}

ValueLevel value_level(const FusionGroup& group, const std::vector<SymExpr>& sizes) {
  Domain d{group.domain, group.reduce_dims, !group.reduce_dims.empty()};
  switch (level_in(d, sizes)) {
    case Level::full:
      return ValueLevel::full;
    case Level::reduced:
      return ValueLevel::reduced;
    default:
      return ValueLevel::broadcast;
  }
}

}  // namespace kiln::graph
