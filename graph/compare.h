// Structural comparison of two traces of one function: the same inputs (captured tensors by
// identity, constants by value, state by slot), the same nodes with the same attributes and
// grad modes, the same outputs. Sizes are not compared here; callers compare them as they need
// (at two probe sizes, or by expression).
#pragma once

#include <optional>
#include <string>

#include "graph/graph.h"

namespace kiln::graph {

// A description of the first difference, naming the input or node; nullopt when none.
std::optional<std::string> structural_difference(const Graph& a, const Graph& b);

}  // namespace kiln::graph
