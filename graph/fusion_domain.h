// What a fusion group iterates and how a value relates to it: the group's domain (and the dims
// a reduction folds into rows), whether a value spans the whole domain or one element per row,
// and why an op ends a group. Shared by the partitioner (fusion.cpp) and the queries fusion.h
// exports (value_level, is_row_select).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace kiln::graph::detail {

// What a group iterates: a domain, and for reductions the dims folded into rows.
struct Domain {
  std::vector<SymExpr> sizes;
  std::vector<std::int64_t> dims;
  bool reduces = false;
};

enum class Level { none, full, reduced };

std::optional<SymExpr> numel_of(const std::vector<SymExpr>& sizes);
// Opaque sizes never compare equal: kiln cannot tell whether two of them agree.
bool same_sizes(const std::vector<SymExpr>& a, const std::vector<SymExpr>& b);
Level level_in(const Domain& d, const std::vector<SymExpr>& sizes);
bool is_fusible(OpClass c);
std::string sizes_str(const std::vector<SymExpr>& sizes);
// Why an op of a non-fusible class ends a group.
std::string boundary_reason(OpId op);

}  // namespace kiln::graph::detail
