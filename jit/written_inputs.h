// The inputs a compiled function writes in place (graph::Graph::mutated_inputs): checked for
// aliasing when traced, and written back after each call.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "jit/call_args.h"

namespace kiln::jit {

// Raises when an input `g` writes shares memory with another of its inputs in this call.
void check_written_inputs_unaliased(const graph::Graph& g, std::span<const CallArg> args,
                                    const std::string& fn);

// The index in g.inputs of each of g.mutated_inputs, in order: found once per entry, since a
// decode step writes a cache per layer among hundreds of inputs on every call.
std::vector<std::size_t> written_input_indices(const graph::Graph& g);

// Writes the final value of each written input (`written`: written_input_indices(g)) into it and
// drops those values from `out`.
void write_back(const graph::Graph& g, std::span<const std::size_t> written,
                std::span<const CallArg> args, std::vector<Tensor>& out);

}  // namespace kiln::jit
