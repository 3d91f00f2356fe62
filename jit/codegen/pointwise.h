// Pointwise kernels: a FusionGroup of elementwise nodes rendered from templates/pointwise.cu
// into CUDA C++, compiled by NVRTC, and launched on the CUDA backend over CUDA tensors.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "graph/fusion.h"
#include "graph/graph.h"

namespace kiln::jit::codegen {

// A rendered kernel and how to call it.
struct PointwiseKernel {
  std::string name;             // the entry point: "k_add_relu_mul"
  std::string source;           // CUDA C++
  std::vector<int> host_views;  // view nodes applied on the host to the kernel's inputs first
  std::vector<int> reads;       // values read from memory, in parameter order
  std::vector<int> scalars;     // 0-dim CPU values passed by value, after the reads
  std::vector<int> writes;      // values written, in parameter order
  int rank = 1;                 // of the index arithmetic
};

// Renders `group` (kind pointwise). Raises kiln::Error naming the node when code generation
// does not cover one of its ops or layouts yet.
PointwiseKernel render_pointwise(const graph::Graph& graph, const graph::FusionGroup& group);

// Runs `kernel` over `domain` (the group's domain at this call's sizes). `values[v]` holds
// each value the kernel reads (CUDA tensors, or 0-dim CPU tensors for the values it takes by
// value) and the inputs of its host views; returns the
// values it writes, in `kernel.writes` order, as new contiguous CUDA tensors.
std::vector<Tensor> run_pointwise(const graph::Graph& graph, const PointwiseKernel& kernel,
                                  const Shape& domain, std::vector<Tensor>& values,
                                  std::span<const std::int64_t> symbol_values = {});

}  // namespace kiln::jit::codegen
