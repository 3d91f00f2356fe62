// Pointwise kernels: a FusionGroup of elementwise nodes rendered from templates/pointwise.cu
// into CUDA C++, compiled by NVRTC, and launched on the CUDA backend over CUDA tensors.
#pragma once

#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "graph/fusion.h"
#include "graph/graph.h"
#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/output_buffers.h"

namespace kiln::jit::codegen {

// A rendered kernel and how to call it.
struct PointwiseKernel {
  std::string name;             // the entry point: "k_add_relu_mul"
  std::string source;           // CUDA C++
  std::vector<int> host_views;  // view nodes applied on the host to the kernel's inputs first
  std::vector<int> reads;       // values read from memory, in parameter order
  // Per read: it broadcasts along the domain's last dim, so the vector path reads one element
  // of it per vector (a 0-dim tensor, a column); the others are read a vector at a time.
  std::vector<bool> splat;
  // Per read: the same in every row (a bias), so where offsets advance a thread loads its vector
  // once (the host takes that path only where its delta is 0).
  std::vector<bool> stationary;
  std::vector<int> scalars;  // 0-dim CPU values passed by value, after the reads
  std::vector<int> writes;   // values written, in parameter order
  int rank = 1;              // of the index arithmetic
  int vector_width = 1;      // elements per thread on the vector path
  // Vectors per thread per iteration where offsets advance (several loads in flight per thread).
  int vectors_per_thread = 1;
  // Whether an op reads its element's row and column (tril, triu) or linear index (random
  // ops): the launch then passes the piece's first element and the domain's last two sizes.
  bool position = false;
  // Whether an expression reports errors (cuda_expr.h: reports_errors): the kernel takes an
  // error flag after its outputs, reserved per call (runtime/device_checks.h).
  bool checks_errors = false;
  // Rendered index-aware (pointwise_indexed.h): it moves data of values it computes.
  bool indexed = false;
  // Symbolic sizes an index-aware kernel takes as arguments (z0, z1..), after its error flag:
  // a cat's split points, its domain's extents; evaluated from each call's symbols.
  std::vector<SymExpr> size_args;
  // Its element function alone (templates/pointwise_element.cu.mustache) where it can be a member
  // of a combo kernel (combo_kernel.h): no host views, numbers, positions, error flag or helper
  // functions, and every read has the domain's sizes. Empty otherwise.
  std::string element_source;
  // Whether its code computes in f16 or bf16 anywhere (a round trip inside the kernel too), so
  // that a combo kernel holding it includes their headers.
  bool uses_f16 = false, uses_bf16 = false;
  // Set by the first launch that KILN_LOG=kernels reported (shared by copies of the kernel).
  std::shared_ptr<std::atomic<bool>> logged;
};

// Renders `group` (kind pointwise), which the fuser formed from nodes the generator covers
// (graph::KernelCoverage); a kiln::Error naming the node is an internal error.
// `order` (see run_pointwise) matters to an index-aware kernel alone, which stores each
// element at its place in the walk.
PointwiseKernel render_pointwise(const graph::Graph& graph, const graph::FusionGroup& group,
                                 std::span<const std::int64_t> order = {});

// Runs `kernel` over `domain` (the group's domain at this call's sizes). `values[v]` holds
// each value the kernel reads (CUDA tensors, or 0-dim CPU tensors for the values it takes by
// value) and the inputs of its host views; returns the
// values it writes, in `kernel.writes` order, as new contiguous CUDA tensors. The launch merges
// dims, takes the vector path where every tensor is aligned for it, and is split where 32-bit
// indices do not reach every element (see pointwise_layout.h).
// `handle` is the kernel's resolved function (a plan's); without one, the kernel is looked up by
// its code on each call.
// `into` holds, per written value, the buffer its plan assigned it (or null: new memory).
// `order` (a permutation of the domain's dims keeping the last, or empty) walks the domain in
// that order: each output is then laid out as its permute by `order` reads it, contiguously,
// and returned as the view of the domain's dims over that memory. Not for a kernel reading its
// element's position; an index-aware kernel must have been rendered for the order
// (render_pointwise).
std::vector<Tensor> run_pointwise(const graph::Graph& graph, const PointwiseKernel& kernel,
                                  const Shape& domain, std::vector<Tensor>& values,
                                  std::span<const std::int64_t> symbol_values = {},
                                  const KernelHandle* handle = nullptr, OutputBuffers into = {},
                                  std::span<const std::int64_t> order = {});

// A contiguous tensor of `domain`'s sizes taken in `order` (in `buffer`, or new memory), seen
// with the domain's dims: what a kernel walking the domain in that order writes.
Tensor walked_output(const std::shared_ptr<Storage>& buffer, const Shape& domain,
                     std::span<const std::int64_t> order, DType dtype);

// The shape of a value of rank `rank` that a pointwise kernel over `domain` writes: every such
// value has the domain's elements, so it is the domain's shape up to leading 1s (a [c] value
// beside a [1, c] one); the graph's traced sizes may be others (a dynamic dim, or an eager op's
// earlier call).
Shape written_shape(const Shape& domain, std::size_t rank);

}  // namespace kiln::jit::codegen
