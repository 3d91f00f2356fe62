// KILN_CHECK=accuracy: every launch of a compiled graph is checked against the CPU reference
// run on the same inputs, and the first kernel whose outputs diverge beyond its dtype's
// tolerance is named with its source: accuracy debugging without a separate minifier.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace kiln::jit {

// Whether KILN_CHECK holds "accuracy" (read on every call).
bool checking_accuracy();

// Runs `nodes` on the CPU from the device values of their inputs and compares every value they
// produced that `device_values` holds; kiln::Error naming `what`, the value, the element and
// both numbers (and `source`, if any) at the first difference beyond tolerance.
void check_step_accuracy(const graph::Graph& g, const std::vector<int>& nodes,
                         const std::vector<Tensor>& device_values,
                         std::span<const std::int64_t> symbol_values, const std::string& what,
                         const std::string& source);

}  // namespace kiln::jit
