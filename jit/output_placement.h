// Attention steps whose outputs are written where their readers want them, so that no kernel
// moves them afterwards. The forward writes o in the layout of the permute that merges its
// heads (the reshape after it is then a view, not a copy), and the backward writes dq, dk and dv
// straight into the slices of the cat that joins them (a fused qkv projection's gradient), so
// the cat is never launched. The fused kernels take any output strides; where they cannot take
// a call, the step runs as before.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "runtime/tensor.h"

namespace kiln::jit {

struct OutputPlacement {
  int node = -1;
  // Per output of the node, the dims of the permute that reads it (empty: written as it is).
  std::vector<std::vector<std::int64_t>> perms;
  // The backward's: the cat that joins the permuted gradients, its dim, and where each output
  // sits among its inputs.
  int cat_node = -1;
  std::int64_t cat_dim = 0;
  std::vector<int> cat_position;

  std::string str(const graph::Graph& g) const;
};

// Where the attention or attention_backward node `node` can write its outputs, or nullopt when
// placing them saves nothing (no permute reads o; the gradients are not joined by one cat that
// nothing else reads).
std::optional<OutputPlacement> plan_output_placement(const graph::Graph& g, int node);

// Runs the node on the fused kernels with its outputs placed: its results, and for the backward
// the joined tensor the cat would have made. nullopt when the kernels cannot take the call (a
// dtype, head dim or broadcast they refuse): the caller then runs the node and the cat as usual.
struct PlacedOutputs {
  std::vector<Tensor> outputs;
  Tensor joined;  // undefined for the forward
};
std::optional<PlacedOutputs> run_placed(const graph::Graph& g, const OutputPlacement& placement,
                                        std::span<const Tensor> operands, const OpAttrs& attrs,
                                        std::span<const Shape> output_shapes);

}  // namespace kiln::jit
