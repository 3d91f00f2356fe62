// Cutting a graph into pieces: the forward and backward graphs of a compiled backward are
// subgraphs of one joint graph, each with its own inputs.
#pragma once

#include <span>
#include <utility>
#include <vector>

#include "graph/graph.h"

namespace kiln::graph {

// Values of `g` that become inputs of the subgraph, each with its description there.
using SubgraphInputs = std::vector<std::pair<int, Input>>;

// The graph of `nodes` (indices into g.nodes, in the order to run them) reading `inputs` and
// returning `outputs` (values of g). Every value a node reads must be an input or made by an
// earlier node of the list. Values keep their metadata, size expressions, devices and layouts; the
// symbols are g's.
Graph subgraph(const Graph& g, const SubgraphInputs& inputs, std::span<const int> nodes,
               std::span<const int> outputs);

// The nodes `values` depend on, directly or through other nodes, as a mask over g.nodes.
std::vector<bool> nodes_feeding(const Graph& g, std::span<const int> values);

}  // namespace kiln::graph
