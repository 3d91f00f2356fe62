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
// The same without a copy of the handle, for the checks every warm call makes of every input.
const Tensor& input_ref(const Input& in, std::span<const CallArg> args);
// Draws this call's random numbers: sets each random draw's seed and offset inputs from its
// generator, advancing it by the draw's counters at this call's sizes, in trace order. Once per
// call, before anything reads the inputs.
void draw_random_inputs(const Graph& g, std::span<const std::int64_t> symbol_values);

}  // namespace kiln::graph
