// The joint forward + backward graph of a traced forward (AOTAutograd's approach): the forward
// is re-recorded on placeholders with autograd history, then the engine runs autograd's
// derivative rules on it under the same tracer, so the backward becomes a graph like any other.
// One rule per op serves eager, traced and compiled backward; nothing is written twice.
#pragma once

#include <set>
#include <span>
#include <vector>

#include "graph/graph.h"
#include "jit/call_args.h"

namespace kiln::jit {

struct JointGraph {
  // Inputs: the forward's (same kinds and argument indices), then one tangent (the incoming
  // gradient) per forward output that requires grad, as argument `num_args + k`.
  // Outputs: the forward's outputs, then one gradient per grad target.
  graph::Graph graph;
  int num_args = 0;
  std::size_t num_forward_outputs = 0;
  // Per forward output: whether it carries a gradient (eagerly it would require grad), and
  // the argument index of its tangent (or -1).
  std::vector<bool> output_requires_grad;
  std::vector<int> tangent_arg;
  // The forward inputs whose gradients the joint graph computes, as the forward graph
  // describes them (an argument, a state slot or a captured tensor); inputs that require grad
  // but that no gradient reaches are not among them.
  std::vector<graph::Input> grad_targets;
  // Symbols whose sizes a derivative rule turned into plain integers: a backward that would not
  // serve other sizes.
  std::set<int> read_symbols;
  bool read_opaque = false;
};

// The joint graph of `forward` (an optimized trace) for a call with `args`; the call's tensors
// that require grad decide what is differentiated. Raises when a derivative rule cannot be
// traced.
JointGraph build_joint_graph(const graph::Graph& forward, std::span<const CallArg> args);

}  // namespace kiln::jit
