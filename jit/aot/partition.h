// Splitting a joint graph into the forward and backward graphs of a compiled backward: which
// values the forward saves and which the backward recomputes. The choice is a minimum cut
// (AOTAutograd's rematerialization): saving a value costs its bytes, an input of the call costs
// nothing (it is alive anyway), pointwise and view chains may be recomputed, a matmul, a
// reduction or an indexing op is never computed twice, and a jit::checkpoint region is never
// saved.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"
#include "jit/aot/joint_graph.h"

namespace kiln::jit {

struct SavedValue {
  int joint_value = -1;
  std::int64_t bytes = 0;  // at the traced sizes
  bool is_input = false;   // an input of the call, kept rather than copied
  std::string why;
};

struct AotPartition {
  // Outputs: the function's outputs, then the saved values.
  graph::Graph forward;
  // Arguments: the saved values, then the tangents; outputs: one gradient per grad target.
  graph::Graph backward;
  std::vector<SavedValue> saved;
  // Per gradient output: the forward outputs whose incoming gradients it reads (when none of
  // them got one, the input gets no gradient, as eagerly).
  std::vector<std::vector<int>> gradient_sources;
  int recomputed_nodes = 0;                     // forward nodes the backward runs again
  std::int64_t saved_activation_bytes() const;  // the saved values that are not inputs
  // What KILN_LOG=aot prints: both graphs and, per saved value, its bytes and why.
  std::string str() const;
};

AotPartition partition_joint(const JointGraph& joint);

}  // namespace kiln::jit
