// What a graph's inputs and node attributes are in one call: the helpers every executor of a
// graph (reference executor, kernel plan, code generator, accuracy check) shares.
#pragma once

#include <cstdint>
#include <span>

#include "graph/call_args.h"
#include "graph/graph.h"

namespace kiln::graph {

// The node's attributes with symbolic target sizes evaluated for this call.
OpAttrs attrs_at(const Graph& g, const Node& n, std::span<const std::int64_t> symbol_values);
// What an input of the graph is in this call: an argument, a declared slot's tensor, or the
// tensor traced.
Tensor input_value(const Input& in, std::span<const CallArg> args);

}  // namespace kiln::graph
