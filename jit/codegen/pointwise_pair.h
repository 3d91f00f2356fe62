// The pointwise vector path's pair function: two consecutive elements computed together where
// values are f16/bf16, so that one cvt.rn.{bf16x2,f16x2}.f32 rounds both, an add, sub or mul of
// two 16-bit values is one packed instruction, and pairs move as 32-bit words
// (templates/pointwise.cu.mustache's `_pair`).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "jit/codegen/pointwise.h"

namespace kiln::jit::codegen {

// The element function for two consecutive elements (lanes _0 and _1): its parameters, its
// arguments on the vector path (j the first element of the pair) and its body, which rounds a
// node's two f32 results to f16/bf16 together and stores them together.
struct ElementPair {
  std::vector<std::string> params, args, lines;
};

// The pair function of kernel `k` (reads, scalars and writes already placed) computing `steps`,
// or nullopt when no value is rounded to f16/bf16 (one element at a time is as good).
std::optional<ElementPair> element_pair(const graph::Graph& g, const PointwiseKernel& k,
                                        const std::vector<int>& steps,
                                        const std::set<int>& computed);

}  // namespace kiln::jit::codegen
