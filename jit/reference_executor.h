// The reference executor: runs a graph node by node on kiln's eager ops, recording autograd
// history. A compiled call takes it when the graph does not run on the device (no KernelPlan)
// and when gradients are needed (generated kernels record none).
#pragma once

#include <span>
#include <vector>

#include "graph/graph.h"
#include "jit/call_args.h"

namespace kiln::jit {

// `symbol_values` gives each symbol's size in this call (from the guard check).
std::vector<Tensor> run_reference(const graph::Graph& g, std::span<const CallArg> args,
                                  std::span<const std::int64_t> symbol_values);

}  // namespace kiln::jit
